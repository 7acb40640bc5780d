//! The web interface (UI-1, UI-2): server-rendered pages over the same
//! service methods the API calls, served by the `airlock` binary beside
//! `/v1`. Thin by the same rule as every front end: a handler reads its
//! request (a signed-in [`session::Viewer`], a form checked by
//! [`session::Posted`]), calls one method of [`airlock_service::Service`]
//! and renders a template. Permissions, quotas, validation and data
//! access are in the service; what a page offers (a button, a form) is
//! chosen with [`airlock_service::Caller::may`], and the service refuses
//! whatever a forged request asks for anyway.
//!
//! Hardening: every page carries [`page::CSP`] (no inline script or
//! style, no framing, forms only to this origin); scripts and styles are
//! files under `/static/` ([`assets`]); every state change is a `POST`
//! with the session's CSRF token in a hidden field (forms work without
//! JavaScript; `static/app.js` adds live logs, refreshes and
//! confirmations on top); templates escape everything they print.
//!
//! | module | pages |
//! |---|---|
//! | [`auth_pages`] | bootstrap, sign-in (password, then TOTP or a recovery code), set-password (a one-time token), sign-out, account (sessions, TOTP enrolment), theme and workspace choice |
//! | [`overview`] | `/`: active runs, pending approvals, failures of the last day |
//! | [`runs`] | the runs list with filters and paging, a run's page with its live log, cancel and re-run |
//! | [`workers`] | the catalog, a worker's page and its run form generated from the manifest |
//! | [`approvals`] | the inbox, one approval's payload and decision, the emergency stop |
//! | [`admin`] | secrets, members, API keys, the audit log |
//! | [`workspace`] | the workspace's retention (settings, preview, a pass now) and its deletion |

pub mod admin;
pub mod approvals;
pub mod assets;
pub mod auth_pages;
pub mod format;
pub mod overview;
pub mod page;
pub mod runs;
pub mod session;
pub mod workers;
pub mod workspace;

use airlock_api::AppState;
use axum::Router;

/// Every route of the web interface, to be mounted with
/// [`airlock_api::Fronts`].
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(assets::routes())
        .merge(auth_pages::routes())
        .merge(overview::routes())
        .merge(runs::routes())
        .merge(workers::routes())
        .merge(approvals::routes())
        .merge(admin::routes())
        .merge(workspace::routes())
}
