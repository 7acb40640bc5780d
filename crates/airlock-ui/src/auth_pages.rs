//! Getting in and being someone (IAM-1 … IAM-3 in a browser): the
//! first owner's bootstrap with the capability file, sign-in with a
//! password and then a TOTP or recovery code, sign-out, the account page
//! (sessions, TOTP enrolment with its recovery codes shown once), and the
//! theme and workspace choices. Each step is one service call; the
//! cookies are the API's (same names, same attributes).

use airlock_api::AppState;
use airlock_api::auth::authenticate_credential;
use airlock_protocol::identity::{
    Bootstrap, Login, PasswordReset, Reauthenticate, SecondFactor, Session, TotpCode,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::{Credential, IssuedSession};
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::format;
use crate::page::{Chrome, Nav, UiError, render, render_status, see_other};
use crate::session::{
    CSRF_FIELD, Posted, THEME_COOKIE, Theme, Viewer, WORKSPACE_COOKIE, client_info, field,
    form_fields, safe_next, same_origin,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-in/mfa", get(mfa_page).post(mfa))
        .route("/sign-out", post(sign_out))
        .route("/bootstrap", get(bootstrap_page).post(bootstrap))
        .route("/set-password", get(set_password_page).post(set_password))
        .route("/account", get(account))
        .route("/account/sessions/{id}/revoke", post(revoke_session))
        .route("/account/totp", post(totp_start))
        .route("/account/totp/confirm", post(totp_confirm))
        .route("/theme", post(theme))
        .route("/workspace", post(workspace))
        .route("/ui/csp-report", post(csp_report))
}

fn set_cookie(r: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// A redirect that starts (or rotates) a session: both cookies.
fn with_session(s: &AppState, to: &str, issued: &IssuedSession) -> Response {
    let mut r = see_other(to);
    set_cookie(&mut r, &s.http.session_cookie(&issued.token));
    set_cookie(&mut r, &s.http.csrf_cookie(&issued.body.csrf_token));
    r
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    title: &'static str,
    theme: &'static str,
    next: String,
    username: String,
    error: String,
    notice: String,
}

#[derive(Debug, Deserialize)]
struct NextQuery {
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    done: Option<String>,
}

async fn sign_in_page(headers: axum::http::HeaderMap, Query(q): Query<NextQuery>) -> Response {
    let notice = match q.done.as_deref() {
        Some("bootstrap") => "The first owner exists. Sign in with the password you chose.",
        Some("signed-out") => "You are signed out.",
        Some("password-set") => "Your password is set. Sign in with it.",
        _ => "",
    };
    render(&SignInPage {
        title: "Sign in",
        theme: Theme::of(&headers).as_str(),
        next: q.next.as_deref().and_then(safe_next).unwrap_or("/").into(),
        username: String::new(),
        error: String::new(),
        notice: notice.into(),
    })
}

/// The password step. A wrong name or password gets one message (the
/// service does the same work either way); the name typed stays.
async fn sign_in(State(s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    let client = client_info(&s, &parts);
    let username = field(&fields, "username").unwrap_or("").to_string();
    let next = field(&fields, "next")
        .and_then(safe_next)
        .unwrap_or("/")
        .to_string();
    let login = Login {
        username: username.clone(),
        password: field(&fields, "password").unwrap_or("").to_string(),
    };
    match s.service.login(&client, &login).await {
        Ok(issued) if issued.body.mfa_required => {
            let to = format!(
                "/sign-in/mfa?next={}",
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            );
            Ok(with_session(&s, &to, &issued))
        }
        Ok(issued) => Ok(with_session(&s, &next, &issued)),
        Err(e) if crate::page::on_the_form(&e) => {
            let status = airlock_api::status_of(e.code);
            Ok(render_status(
                status,
                &SignInPage {
                    title: "Sign in",
                    theme: Theme::of(&parts.headers).as_str(),
                    next,
                    username,
                    error: e.message,
                    notice: String::new(),
                },
            ))
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "mfa.html")]
struct MfaPage {
    title: &'static str,
    theme: &'static str,
    csrf: String,
    next: String,
    error: String,
}

async fn mfa_page(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
    Query(q): Query<NextQuery>,
) -> Response {
    if s.http.session_token(&headers).is_none() {
        return see_other("/sign-in");
    }
    render(&MfaPage {
        title: "Second factor",
        theme: Theme::of(&headers).as_str(),
        csrf: s.http.csrf_token(&headers).unwrap_or_default(),
        next: q.next.as_deref().and_then(safe_next).unwrap_or("/").into(),
        error: String::new(),
    })
}

/// The second step: a TOTP code or a recovery code, with the pending
/// session's CSRF token from the form.
async fn mfa(State(s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    let Some(token) = s.http.session_token(&parts.headers) else {
        return Err(UiError::SignIn { next: "/".into() });
    };
    let cred = Credential::Session {
        token,
        csrf: field(&fields, CSRF_FIELD).map(str::to_string),
        changes_state: true,
    };
    let p = authenticate_credential(&s, &parts, cred, true).await?;
    let next = field(&fields, "next")
        .and_then(safe_next)
        .unwrap_or("/")
        .to_string();
    let nonempty = |k| {
        field(&fields, k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let b = SecondFactor {
        code: nonempty("code"),
        recovery_code: nonempty("recovery_code"),
    };
    match s.service.login_mfa(&p, &client_info(&s, &parts), &b).await {
        Ok(issued) => Ok(with_session(&s, &next, &issued)),
        Err(e) if e.code == ErrorCode::MfaNotPending => Ok(see_other(&next)),
        Err(e) if crate::page::on_the_form(&e) => Ok(render_status(
            airlock_api::status_of(e.code),
            &MfaPage {
                title: "Second factor",
                theme: Theme::of(&parts.headers).as_str(),
                csrf: s.http.csrf_token(&parts.headers).unwrap_or_default(),
                next,
                error: e.message,
            },
        )),
        Err(e) => Err(e.into()),
    }
}

/// Ends the session (a pending one too) and clears both cookies.
async fn sign_out(State(s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    if let Some(token) = s.http.session_token(&parts.headers) {
        let cred = Credential::Session {
            token,
            csrf: field(&fields, CSRF_FIELD).map(str::to_string),
            changes_state: true,
        };
        match authenticate_credential(&s, &parts, cred, true).await {
            Ok(p) => s.service.logout(&p).await?,
            // A session that already ended: only the cookies are left.
            Err(e) if e.0.code == ErrorCode::Unauthenticated => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut r = see_other("/sign-in?done=signed-out");
    set_cookie(&mut r, &s.http.clear_cookie());
    set_cookie(&mut r, &s.http.clear_csrf_cookie());
    Ok(r)
}

#[derive(Template)]
#[template(path = "bootstrap.html")]
struct BootstrapPage {
    title: &'static str,
    theme: &'static str,
    username: String,
    workspace: String,
    error: String,
}

async fn bootstrap_page(headers: axum::http::HeaderMap) -> Response {
    render(&BootstrapPage {
        title: "Create the first owner",
        theme: Theme::of(&headers).as_str(),
        username: String::new(),
        workspace: String::new(),
        error: String::new(),
    })
}

/// IAM-1 from a browser: the capability from the key directory's
/// `bootstrap.token`, once. The service refuses a used or wrong one.
async fn bootstrap(State(s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    let username = field(&fields, "username").unwrap_or("").trim().to_string();
    let workspace = field(&fields, "workspace_name")
        .unwrap_or("")
        .trim()
        .to_string();
    let password = field(&fields, "password").unwrap_or("").to_string();
    let again = field(&fields, "password_again").unwrap_or("");
    let page = |error: String| BootstrapPage {
        title: "Create the first owner",
        theme: Theme::of(&parts.headers).as_str(),
        username: username.clone(),
        workspace: workspace.clone(),
        error,
    };
    if password != again {
        return Ok(render_status(
            StatusCode::BAD_REQUEST,
            &page("The two passwords differ.".into()),
        ));
    }
    let b = Bootstrap {
        token: field(&fields, "token").unwrap_or("").trim().to_string(),
        username: username.clone(),
        password,
        workspace_name: (!workspace.is_empty()).then(|| workspace.clone()),
    };
    match s.service.bootstrap(&client_info(&s, &parts), &b).await {
        Ok(_) => Ok(see_other("/sign-in?done=bootstrap")),
        Err(e) if crate::page::on_the_form(&e) => Ok(render_status(
            airlock_api::status_of(e.code),
            &page(e.message),
        )),
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "set_password.html")]
struct SetPasswordPage {
    title: &'static str,
    theme: &'static str,
    error: String,
}

async fn set_password_page(headers: axum::http::HeaderMap) -> Response {
    render(&SetPasswordPage {
        title: "Set your password",
        theme: Theme::of(&headers).as_str(),
        error: String::new(),
    })
}

/// A new member's first password, or a reset an operator issued (IAM-4):
/// the single-use token they were handed. The service checks the token
/// and the password's rules; success ends every session of the account.
async fn set_password(State(s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    let password = field(&fields, "password").unwrap_or("").to_string();
    let page = |error: String| SetPasswordPage {
        title: "Set your password",
        theme: Theme::of(&parts.headers).as_str(),
        error,
    };
    if password != field(&fields, "password_again").unwrap_or("") {
        return Ok(render_status(
            StatusCode::BAD_REQUEST,
            &page("The two passwords differ.".into()),
        ));
    }
    let b = PasswordReset {
        token: field(&fields, "token").unwrap_or("").trim().to_string(),
        new_password: password,
    };
    match s.service.password_reset(&client_info(&s, &parts), &b).await {
        Ok(()) => Ok(see_other("/sign-in?done=password-set")),
        Err(e) if crate::page::on_the_form(&e) => Ok(render_status(
            airlock_api::status_of(e.code),
            &page(e.message),
        )),
        Err(e) => Err(e.into()),
    }
}

/// One session as the account page lists it.
#[derive(Debug)]
struct SessionRow {
    id: String,
    current: bool,
    client: String,
    created: String,
    last_seen: String,
    expires: String,
}

impl From<Session> for SessionRow {
    fn from(s: Session) -> Self {
        Self {
            client: format!(
                "{} · {}",
                s.client_ip.unwrap_or_else(|| "unknown address".into()),
                format::clip(&s.user_agent.unwrap_or_else(|| "unknown client".into()), 80)
            ),
            id: s.id,
            current: s.current,
            created: format::time(s.created_at),
            last_seen: format::time(s.last_seen_at),
            expires: format::time(s.expires_at),
        }
    }
}

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    chrome: Chrome,
    mfa_enabled: bool,
    sessions: Vec<SessionRow>,
    /// Set while enrolling: the new secret, its URI and its QR code.
    enrolment: Option<Enrolment>,
    /// Shown once, right after confirming.
    recovery_codes: Vec<String>,
    error: String,
}

#[derive(Debug)]
struct Enrolment {
    secret: String,
    uri: String,
    qr: String,
}

async fn account_page(
    s: &AppState,
    v: &Viewer,
    enrolment: Option<Enrolment>,
    recovery_codes: Vec<String>,
    error: String,
) -> Result<AccountPage, UiError> {
    let p = v
        .principal()
        .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "sign in to see your account"))?;
    let who = s.service.whoami(p).await?;
    let sessions = s.service.list_sessions(p).await?;
    Ok(AccountPage {
        chrome: Chrome::load(s, v, Nav::Account, "Your account").await,
        mfa_enabled: who.mfa_enabled,
        sessions: sessions
            .sessions
            .into_iter()
            .map(SessionRow::from)
            .collect(),
        enrolment,
        recovery_codes,
        error,
    })
}

async fn account(State(s): State<AppState>, v: Viewer) -> Result<Response, UiError> {
    Ok(render(
        &account_page(&s, &v, None, Vec::new(), String::new()).await?,
    ))
}

async fn revoke_session(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let principal = p
        .viewer
        .principal()
        .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "sign in first"))?;
    s.service.revoke_session(principal, &id).await?;
    Ok(see_other("/account"))
}

/// A form with no fields but its CSRF token.
#[derive(Debug, Deserialize)]
pub struct Empty {}

#[derive(Debug, Deserialize)]
struct PasswordForm {
    password: String,
}

/// Starts TOTP enrolment (the password again): the secret is shown once,
/// as text, as an `otpauth:` URI and as a QR code.
async fn totp_start(
    State(s): State<AppState>,
    p: Posted<PasswordForm>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    let principal = v
        .principal()
        .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "sign in first"))?;
    let b = Reauthenticate {
        password: p.form.password.clone(),
    };
    match s.service.mfa_enrol(principal, &b).await {
        Ok(e) => {
            let qr = qr_svg(&e.otpauth_uri);
            let enrolment = Enrolment {
                secret: e.secret,
                uri: e.otpauth_uri,
                qr,
            };
            Ok(render(
                &account_page(&s, v, Some(enrolment), Vec::new(), String::new()).await?,
            ))
        }
        Err(e) if crate::page::on_the_form(&e) => Ok(render_status(
            airlock_api::status_of(e.code),
            &account_page(&s, v, None, Vec::new(), e.message).await?,
        )),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize)]
struct CodeForm {
    code: String,
}

async fn totp_confirm(State(s): State<AppState>, p: Posted<CodeForm>) -> Result<Response, UiError> {
    let v = &p.viewer;
    let principal = v
        .principal()
        .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "sign in first"))?;
    let b = TotpCode {
        code: p.form.code.trim().to_string(),
    };
    match s.service.mfa_confirm(principal, &b).await {
        Ok(codes) => Ok(render(
            &account_page(&s, v, None, codes.recovery_codes, String::new()).await?,
        )),
        Err(e) if crate::page::on_the_form(&e) => Ok(render_status(
            airlock_api::status_of(e.code),
            &account_page(&s, v, None, Vec::new(), e.message).await?,
        )),
        Err(e) => Err(e.into()),
    }
}

/// The `otpauth:` URI as a QR code, an SVG in a `data:` URL (the page
/// policy allows `data:` images and nothing inline).
fn qr_svg(uri: &str) -> String {
    use base64::Engine;
    match qrcode::QrCode::new(uri.as_bytes()) {
        Ok(code) => {
            let svg = code
                .render::<qrcode::render::svg::Color>()
                .min_dimensions(200, 200)
                .dark_color(qrcode::render::svg::Color("#000000"))
                .light_color(qrcode::render::svg::Color("#ffffff"))
                .build();
            format!(
                "data:image/svg+xml;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(svg)
            )
        }
        Err(_) => String::new(),
    }
}

/// The theme cookie (a year; not a secret, so no session is needed).
async fn theme(State(_s): State<AppState>, req: Request) -> Result<Response, UiError> {
    let (parts, fields) = form_fields(req).await?;
    same_origin(&parts.headers)?;
    let theme = field(&fields, "theme")
        .and_then(Theme::parse)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidRequest,
                "theme must be system, light or dark",
            )
        })?;
    let next = field(&fields, "next").and_then(safe_next).unwrap_or("/");
    let mut r = see_other(next);
    set_cookie(
        &mut r,
        &format!(
            "{THEME_COOKIE}={}; Path=/; SameSite=Lax; Max-Age=31536000",
            theme.as_str()
        ),
    );
    Ok(r)
}

#[derive(Debug, Deserialize)]
struct WorkspaceForm {
    workspace: String,
    #[serde(default)]
    next: Option<String>,
}

/// The workspace pages act in: checked by the service (a workspace the
/// person is not a member of is refused, not remembered).
async fn workspace(
    State(s): State<AppState>,
    p: Posted<WorkspaceForm>,
) -> Result<Response, UiError> {
    let principal = p
        .viewer
        .principal()
        .cloned()
        .ok_or_else(|| Error::new(ErrorCode::SessionRequired, "sign in first"))?;
    let c = s
        .service
        .caller(principal, Some(p.form.workspace.as_str()))
        .await?;
    let next = p.form.next.as_deref().and_then(safe_next).unwrap_or("/");
    let mut r = see_other(next);
    set_cookie(
        &mut r,
        &format!(
            "{WORKSPACE_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000",
            c.workspace
        ),
    );
    Ok(r)
}

/// Where browsers report what the page policy blocked. Bounded, logged
/// (one line, the violated directive and blocked URL clipped), answered
/// with 204; nothing else is done with it.
async fn csp_report(req: Request) -> Response {
    let body = axum::body::to_bytes(req.into_body(), 16 * 1024)
        .await
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let r = &v["csp-report"];
    let text = |k: &str| format::clip(r[k].as_str().unwrap_or(""), 200);
    tracing::warn!(
        event = "csp_violation",
        directive = %text("violated-directive"),
        blocked = %text("blocked-uri"),
        page = %text("document-uri"),
        "the browser blocked something the page policy forbids"
    );
    StatusCode::NO_CONTENT.into_response()
}
