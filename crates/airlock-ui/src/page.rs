//! Shaping answers as pages: the response headers every page carries, the
//! chrome around each page (navigation, badge count, the emergency stop
//! and its banner), and errors as pages (or a redirect to sign in).

use airlock_api::{AppState, status_of};
use airlock_protocol::approvals::{ApprovalState, ListApprovals};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::Operation;
use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use crate::session::{Theme, Viewer};

/// The policy of every page (UI-2): scripts and styles from this origin
/// only (no inline script, handler or `style=` attribute), no plugins, no
/// framing, forms only to this origin, violations reported to
/// `/ui/csp-report`.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
frame-ancestors 'none'; report-uri /ui/csp-report";

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Workers,
    Runs,
    Approvals,
    Secrets,
    Members,
    Keys,
    Audit,
    Workspace,
    Account,
    None,
}

/// One entry of the navigation.
#[derive(Debug, Clone)]
pub struct NavItem {
    pub href: &'static str,
    pub label: &'static str,
    pub current: bool,
    /// A count shown beside the label (pending approvals).
    pub badge: Option<String>,
}

/// What surrounds every signed-in page.
#[derive(Debug, Clone)]
pub struct Chrome {
    pub title: String,
    pub username: String,
    pub workspace: String,
    pub workspace_id: String,
    /// Other workspaces of the person, for the switcher: (id, name).
    pub workspaces: Vec<(String, String)>,
    pub csrf: String,
    pub theme: &'static str,
    pub nav: Vec<NavItem>,
    /// The workspace's emergency stop is engaged.
    pub stopped: bool,
    pub stopped_reason: String,
    pub may_stop: bool,
    pub may_resume: bool,
    /// Where this page is (forms that come back here).
    pub here: String,
    /// A one-line notice after a change ("Secret saved.").
    pub notice: String,
    /// The page is the person's own account page.
    pub account_current: bool,
}

impl Chrome {
    /// The chrome of a page titled `title` in section `nav`. Reads the
    /// badge count and the emergency state through the service; a part
    /// the person may not see is left out, never an error.
    pub async fn load(s: &AppState, v: &Viewer, nav: Nav, title: impl Into<String>) -> Self {
        let c = &v.caller;
        let badge = if c.may(Operation::DecideApprovals) || c.may(Operation::ReadRuns) {
            let q = ListApprovals {
                state: Some(ApprovalState::Pending),
                limit: Some(100),
                ..Default::default()
            };
            match s.service.list_approvals(c, &q).await {
                Ok(l) if l.approvals.len() >= 100 => Some("99+".to_string()),
                Ok(l) if !l.approvals.is_empty() => Some(l.approvals.len().to_string()),
                _ => None,
            }
        } else {
            None
        };
        let (stopped, stopped_reason) = match s.service.emergency_state(c).await {
            Ok(e) => (e.stopped, e.reason.unwrap_or_default()),
            Err(_) => (false, String::new()),
        };
        let (workspace, workspaces) = match v.principal() {
            Some(p) => match s.service.list_workspaces(p).await {
                Ok(l) => {
                    let name = l
                        .workspaces
                        .iter()
                        .find(|w| w.workspace_id == c.workspace)
                        .map(|w| w.workspace_name.clone())
                        .unwrap_or_else(|| c.workspace.clone());
                    let all = l
                        .workspaces
                        .into_iter()
                        .map(|w| (w.workspace_id, w.workspace_name))
                        .collect();
                    (name, all)
                }
                Err(_) => (c.workspace.clone(), Vec::new()),
            },
            None => (c.workspace.clone(), Vec::new()),
        };
        let item = |href, label, which: Nav, badge: Option<String>| NavItem {
            href,
            label,
            current: which == nav,
            badge,
        };
        let mut items = vec![item("/", "Overview", Nav::Overview, None)];
        if c.may(Operation::ReadWorkers) {
            items.push(item("/workers", "Workers", Nav::Workers, None));
        }
        if c.may(Operation::ReadRuns) {
            items.push(item("/runs", "Runs", Nav::Runs, None));
            items.push(item("/approvals", "Approvals", Nav::Approvals, badge));
        }
        if c.may(Operation::ListSecrets) {
            items.push(item("/secrets", "Secrets", Nav::Secrets, None));
        }
        items.push(item("/members", "Members", Nav::Members, None));
        if c.may(Operation::ManageOwnKeys) {
            items.push(item("/keys", "API keys", Nav::Keys, None));
        }
        if c.may(Operation::ReadAudit) {
            items.push(item("/audit", "Audit", Nav::Audit, None));
        }
        if c.may(Operation::ManageWorkspace) {
            items.push(item("/settings", "Workspace", Nav::Workspace, None));
        }
        Self {
            title: title.into(),
            username: v.username().to_string(),
            workspace,
            workspace_id: c.workspace.clone(),
            workspaces,
            csrf: v.csrf.clone(),
            theme: v.theme.as_str(),
            nav: items,
            stopped,
            stopped_reason,
            may_stop: c.may(Operation::StopEmergency),
            may_resume: c.may(Operation::ResumeEmergency),
            here: v.here.clone(),
            notice: String::new(),
            account_current: nav == Nav::Account,
        }
    }

    pub fn with_notice(mut self, notice: impl Into<String>) -> Self {
        self.notice = notice.into();
        self
    }
}

/// The headers of every HTML answer of the web interface.
pub fn html_headers(r: &mut Response) {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// A rendered template with `status`, or the error page when rendering
/// failed (a template bug, never the person's input).
pub fn render_status<T: Template>(status: StatusCode, t: &T) -> Response {
    match t.render() {
        Ok(body) => {
            let mut r = (status, body).into_response();
            html_headers(&mut r);
            r
        }
        Err(e) => {
            tracing::error!(error = %e, "a page could not be rendered");
            UiError::Page(Error::new(
                ErrorCode::Internal,
                "this page could not be shown",
            ))
            .into_response()
        }
    }
}

/// A rendered template (200).
pub fn render<T: Template>(t: &T) -> Response {
    render_status(StatusCode::OK, t)
}

/// After a change: back to a page (`303 See Other`, so a reload does not
/// send the form again).
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// Why a page is not shown.
#[derive(Debug)]
pub enum UiError {
    /// Not signed in (or the session ended): to the sign-in page, then back.
    SignIn { next: String },
    /// Signed in, the second factor still owed.
    SecondFactor,
    /// A form arrived after its session ended: nothing was done.
    SessionEnded { next: String },
    /// Anything else, shown as a page with the error's status.
    Page(Error),
}

impl From<Error> for UiError {
    fn from(e: Error) -> Self {
        match e.code {
            ErrorCode::Unauthenticated => Self::SignIn { next: "/".into() },
            ErrorCode::MfaRequired => Self::SecondFactor,
            _ => Self::Page(e),
        }
    }
}

impl From<airlock_api::ApiError> for UiError {
    fn from(e: airlock_api::ApiError) -> Self {
        e.0.into()
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: &'a str,
    code: &'a str,
    theme: &'a str,
    /// Whether signing in again is what helps.
    sign_in: bool,
}

#[derive(Template)]
#[template(path = "session_ended.html")]
struct SessionEndedPage {
    title: &'static str,
    theme: &'static str,
    sign_in: String,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        match self {
            Self::SignIn { next } => {
                let to = match crate::session::safe_next(&next) {
                    Some(n) if n != "/" => format!(
                        "/sign-in?next={}",
                        form_urlencoded::byte_serialize(n.as_bytes()).collect::<String>()
                    ),
                    _ => "/sign-in".to_string(),
                };
                see_other(&to)
            }
            Self::SecondFactor => see_other("/sign-in/mfa"),
            Self::SessionEnded { next } => {
                let back = crate::session::safe_next(&next).unwrap_or("/");
                let page = SessionEndedPage {
                    title: "Your session ended",
                    theme: Theme::System.as_str(),
                    sign_in: format!(
                        "/sign-in?next={}",
                        form_urlencoded::byte_serialize(back.as_bytes()).collect::<String>()
                    ),
                };
                render_status(StatusCode::UNAUTHORIZED, &page)
            }
            Self::Page(e) => {
                let status = status_of(e.code);
                let title = match status {
                    StatusCode::NOT_FOUND => "Not found",
                    StatusCode::FORBIDDEN => "Not allowed",
                    StatusCode::CONFLICT => "Conflict",
                    StatusCode::TOO_MANY_REQUESTS => "Too many requests",
                    s if s.is_server_error() => "Something went wrong",
                    _ => "That did not work",
                };
                let sign_in = e.code == ErrorCode::CsrfFailed;
                let message = if sign_in {
                    "This form could not be accepted: it came from another page or site, or \
                     your session changed since the page was loaded. Nothing was changed. \
                     Go back, reload the page and send it again (sign in again if asked)."
                        .to_string()
                } else {
                    e.public_message().to_string()
                };
                let page = ErrorPage {
                    title,
                    message: &message,
                    code: e.code.as_str(),
                    theme: Theme::System.as_str(),
                    sign_in,
                };
                render_status(status, &page)
            }
        }
    }
}

/// Whether an error is about what the person sent (shown beside the form,
/// with what they typed), rather than a failure of the server.
pub fn on_the_form(e: &Error) -> bool {
    status_of(e.code).is_client_error()
}

/// Usernames by user id, to show people by name (ids when the list
/// cannot be read).
pub async fn names(
    s: &AppState,
    v: &crate::session::Viewer,
) -> std::collections::HashMap<String, String> {
    match s.service.list_members(&v.caller).await {
        Ok(l) => l
            .members
            .into_iter()
            .map(|m| (m.user_id, m.username))
            .collect(),
        Err(_) => std::collections::HashMap::new(),
    }
}

/// The username of `id`, else `id` itself (`cli`, `schedule:…`, a member
/// who left).
pub fn name_of(names: &std::collections::HashMap<String, String>, id: &str) -> String {
    names.get(id).cloned().unwrap_or_else(|| id.to_string())
}
