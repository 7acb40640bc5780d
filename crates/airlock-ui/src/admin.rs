//! Administration pages (UI-1): secrets (names, status and the workers
//! that use them; values are write-only and never rendered, not even
//! after an error), members and roles, the person's API keys (a new key
//! shown once), and the audit log with the chain's verification.
//!
//! Each form is offered only when the service says the person may use it
//! ([`Operation`]); the service refuses forged requests anyway. Dangerous
//! forms (delete, remove, revoke) ask for confirmation: a dialog with
//! JavaScript, a page of their own without it.

use airlock_api::AppState;
use airlock_protocol::audit::ListAudit;
use airlock_protocol::identity::{CreateKey, PutMember};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::Operation;
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use crate::approvals::{ConfirmPage, confirmed};
use crate::auth_pages::Empty;
use crate::format;
use crate::page::{Chrome, Nav, UiError, on_the_form, render, render_status, see_other};
use crate::session::{Posted, Viewer, field};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/secrets", get(secrets).post(put_secret))
        .route("/secrets/{name}/delete", post(delete_secret))
        .route("/members", get(members).post(put_member))
        .route("/members/{username}/remove", post(remove_member))
        .route("/keys", get(keys).post(create_key))
        .route("/keys/{id}/revoke", post(revoke_key))
        .route("/audit", get(audit))
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[derive(Debug, Deserialize)]
struct DoneQuery {
    #[serde(default)]
    done: Option<String>,
}

/// The one-line notice after a change.
fn notice_of(done: Option<&str>) -> &'static str {
    match done {
        Some("secret-saved") => "Secret saved. Its value is not shown again.",
        Some("secret-deleted") => "Secret deleted.",
        Some("member-saved") => "Member saved.",
        Some("member-removed") => "Member removed.",
        Some("key-revoked") => "Key revoked.",
        _ => "",
    }
}

/// A confirmation page for a dangerous form that arrived without
/// `confirm=yes`.
async fn confirm_page(
    s: &AppState,
    v: &Viewer,
    nav: Nav,
    heading: String,
    message: &str,
    action: String,
    button: &str,
) -> Response {
    let back = match nav {
        Nav::Secrets => "/secrets",
        Nav::Members => "/members",
        Nav::Keys => "/keys",
        _ => "/",
    };
    render(&ConfirmPage {
        chrome: Chrome::load(s, v, nav, heading.clone()).await,
        heading,
        message: message.into(),
        action,
        hidden: vec![("confirm".into(), "yes".into())],
        text: None,
        button: button.into(),
        danger: true,
        back: back.into(),
        error: String::new(),
    })
}

// ---------------------------------------------------------------- secrets

#[derive(Debug)]
struct SecretRow {
    /// The name as a path segment.
    path: String,
    name: String,
    status: String,
    set: bool,
    updated: String,
    last_used: String,
    used_by: String,
}

#[derive(Template)]
#[template(path = "secrets.html")]
struct SecretsPage {
    chrome: Chrome,
    rows: Vec<SecretRow>,
    may_write: bool,
    /// The name typed into the form (never the value).
    name: String,
    error: String,
}

async fn secrets_page(
    s: &AppState,
    v: &Viewer,
    name: String,
    error: String,
) -> Result<SecretsPage, UiError> {
    let l = s.service.list_secrets(&v.caller).await?;
    let rows = l
        .secrets
        .into_iter()
        .map(|x| SecretRow {
            set: x.version > 0,
            status: if x.version > 0 {
                format!("set (version {})", x.version)
            } else {
                "missing: declared by a worker, not set".into()
            },
            updated: if x.version > 0 {
                format::time(x.updated_at)
            } else {
                "—".into()
            },
            last_used: format::time_opt(x.last_used_at),
            used_by: x.used_by.join(", "),
            path: enc(&x.name),
            name: x.name,
        })
        .collect();
    Ok(SecretsPage {
        chrome: Chrome::load(s, v, Nav::Secrets, "Secrets").await,
        rows,
        may_write: v.caller.may(Operation::WriteSecrets),
        name,
        error,
    })
}

#[derive(Debug, Deserialize)]
struct SecretsQuery {
    #[serde(default)]
    done: Option<String>,
    /// A name to prefill the form with (the row's "set" or "rotate" link).
    #[serde(default)]
    name: Option<String>,
}

async fn secrets(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<SecretsQuery>,
) -> Result<Response, UiError> {
    let name = format::clip(q.name.as_deref().unwrap_or(""), 64);
    let mut p = secrets_page(&s, &v, name, String::new()).await?;
    p.chrome = p.chrome.with_notice(notice_of(q.done.as_deref()));
    Ok(render(&p))
}

/// Sets or rotates a secret. The value goes to the service and nowhere
/// else: an error page shows the name again, never the value.
async fn put_secret(State(s): State<AppState>, p: Posted<Empty>) -> Result<Response, UiError> {
    let v = &p.viewer;
    let name = field(&p.fields, "name").unwrap_or("").trim().to_string();
    let value = field(&p.fields, "value").unwrap_or("");
    let r = if name.is_empty() {
        Err(Error::invalid_body("name is required"))
    } else {
        s.service
            .put_secret(&v.caller, &name, value.as_bytes().to_vec())
            .await
    };
    match r {
        Ok(_) => Ok(see_other("/secrets?done=secret-saved")),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::Forbidden => {
            let status = airlock_api::status_of(e.code);
            let page = secrets_page(&s, v, name, e.message).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

async fn delete_secret(
    State(s): State<AppState>,
    Path(name): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    if !confirmed(&p.fields) {
        return Ok(confirm_page(
            &s,
            v,
            Nav::Secrets,
            format!("Delete the secret {name}?"),
            "Workers that declare it can no longer start until it is set again. \
             The value cannot be recovered.",
            format!("/secrets/{}/delete", enc(&name)),
            "Delete",
        )
        .await);
    }
    s.service.delete_secret(&v.caller, &name).await?;
    Ok(see_other("/secrets?done=secret-deleted"))
}

// ---------------------------------------------------------------- members

#[derive(Debug)]
struct MemberRow {
    /// The username as a path segment.
    path: String,
    username: String,
    role: String,
    since: String,
    you: bool,
}

#[derive(Template)]
#[template(path = "members.html")]
struct MembersPage {
    chrome: Chrome,
    rows: Vec<MemberRow>,
    /// The role table: (role, its permissions).
    roles: Vec<(String, String)>,
    role_names: Vec<String>,
    yours: String,
    may_manage: bool,
    username: String,
    role: String,
    error: String,
    /// The one-time set-password token of an account just created.
    setup_token: String,
    setup_for: String,
}

async fn members_page(
    s: &AppState,
    v: &Viewer,
    username: String,
    role: String,
    error: String,
) -> Result<MembersPage, UiError> {
    let l = s.service.list_members(&v.caller).await?;
    let roles = s.service.list_roles(&v.caller)?;
    let me = v.username().to_string();
    Ok(MembersPage {
        chrome: Chrome::load(s, v, Nav::Members, "Members").await,
        rows: l
            .members
            .into_iter()
            .map(|m| MemberRow {
                you: m.username == me,
                path: enc(&m.username),
                since: format::time(m.created_at),
                username: m.username,
                role: m.role,
            })
            .collect(),
        role_names: roles.roles.iter().map(|r| r.role.clone()).collect(),
        roles: roles
            .roles
            .into_iter()
            .map(|r| (r.role, r.permissions.join(", ")))
            .collect(),
        yours: roles.yours,
        may_manage: v.caller.may(Operation::ManageMembers),
        username,
        role,
        error,
        setup_token: String::new(),
        setup_for: String::new(),
    })
}

async fn members(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<DoneQuery>,
) -> Result<Response, UiError> {
    let mut p = members_page(&s, &v, String::new(), String::new(), String::new()).await?;
    p.chrome = p.chrome.with_notice(notice_of(q.done.as_deref()));
    Ok(render(&p))
}

/// Adds a member or changes a role. A username without an account
/// becomes an invitation (in the instance's own workspace): its
/// set-password token is shown once, on this answer only.
async fn put_member(State(s): State<AppState>, p: Posted<Empty>) -> Result<Response, UiError> {
    let v = &p.viewer;
    let username = field(&p.fields, "username")
        .unwrap_or("")
        .trim()
        .to_string();
    let role = field(&p.fields, "role").unwrap_or("").to_string();
    let r = if username.is_empty() {
        Err(Error::invalid_body("username is required"))
    } else {
        s.service
            .put_member(&v.caller, &username, &PutMember { role: role.clone() })
            .await
    };
    match r {
        Ok((changed, _added)) => match changed.setup_token {
            Some(token) => {
                let mut page =
                    members_page(&s, v, String::new(), String::new(), String::new()).await?;
                page.chrome = page.chrome.with_notice(format!(
                    "{} was added. They have no password yet: hand them the one-time token below.",
                    changed.member.username
                ));
                page.setup_token = token;
                page.setup_for = changed.member.username;
                Ok(render(&page))
            }
            None => Ok(see_other("/members?done=member-saved")),
        },
        Err(e) if on_the_form(&e) => {
            let status = airlock_api::status_of(e.code);
            let page = members_page(&s, v, username, role, e.message).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

async fn remove_member(
    State(s): State<AppState>,
    Path(username): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    if !confirmed(&p.fields) {
        return Ok(confirm_page(
            &s,
            v,
            Nav::Members,
            format!("Remove {username} from this workspace?"),
            "They lose access to this workspace at once. Their API keys here stop working.",
            format!("/members/{}/remove", enc(&username)),
            "Remove",
        )
        .await);
    }
    match s.service.delete_member(&v.caller, &username).await {
        Ok(()) => Ok(see_other("/members?done=member-removed")),
        Err(e) if on_the_form(&e) && e.code != ErrorCode::NotFound => {
            let status = airlock_api::status_of(e.code);
            let page = members_page(&s, v, String::new(), String::new(), e.message).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

// ------------------------------------------------------------------- keys

#[derive(Debug)]
struct KeyRow {
    /// The id as a path segment.
    path: String,
    name: String,
    prefix: String,
    scopes: String,
    created: String,
    expires: String,
    last_used: String,
    revoked: String,
    live: bool,
}

/// A scope checkbox of the create form.
#[derive(Debug)]
struct Scope {
    name: String,
    checked: bool,
}

/// Lifetimes offered, in days.
const LIFETIMES: [u64; 5] = [7, 30, 90, 180, 366];

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    chrome: Chrome,
    rows: Vec<KeyRow>,
    scopes: Vec<Scope>,
    lifetimes: Vec<(u64, bool)>,
    name: String,
    error: String,
    /// The key just created, shown once.
    created: String,
    created_name: String,
}

async fn keys_page(
    s: &AppState,
    v: &Viewer,
    name: String,
    chosen: &[String],
    days: u64,
    error: String,
) -> Result<KeysPage, UiError> {
    let l = s.service.list_keys(&v.caller).await?;
    let now = s.service.now();
    // The scopes offered are the person's role's permissions, as the
    // service's role table lists them (it refuses any other anyway).
    let roles = s.service.list_roles(&v.caller)?;
    let mine = roles
        .roles
        .into_iter()
        .find(|r| r.role == roles.yours)
        .map(|r| r.permissions)
        .unwrap_or_default();
    Ok(KeysPage {
        chrome: Chrome::load(s, v, Nav::Keys, "API keys").await,
        rows: l
            .api_keys
            .into_iter()
            .map(|k| KeyRow {
                live: k.revoked_at.is_none() && k.expires_at.is_none_or(|e| e > now),
                scopes: k.scopes.join(", "),
                created: format::time(k.created_at),
                expires: k
                    .expires_at
                    .map(format::time)
                    .unwrap_or_else(|| "never".into()),
                last_used: k
                    .last_used_at
                    .map(format::time)
                    .unwrap_or_else(|| "never".into()),
                revoked: format::time_opt(k.revoked_at),
                path: enc(&k.id),
                name: k.name,
                prefix: k.prefix,
            })
            .collect(),
        scopes: mine
            .into_iter()
            .map(|p| Scope {
                checked: chosen.contains(&p),
                name: p,
            })
            .collect(),
        lifetimes: LIFETIMES.iter().map(|d| (*d, *d == days)).collect(),
        name,
        error,
        created: String::new(),
        created_name: String::new(),
    })
}

async fn keys(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<DoneQuery>,
) -> Result<Response, UiError> {
    let mut p = keys_page(&s, &v, String::new(), &[], 90, String::new()).await?;
    p.chrome = p.chrome.with_notice(notice_of(q.done.as_deref()));
    Ok(render(&p))
}

/// Mints a key: shown on this answer once, with a copy button; the list
/// shows only its prefix from then on.
async fn create_key(State(s): State<AppState>, p: Posted<Empty>) -> Result<Response, UiError> {
    let v = &p.viewer;
    let name = field(&p.fields, "name").unwrap_or("").trim().to_string();
    let chosen: Vec<String> = p
        .fields
        .iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .collect();
    let parsed = field(&p.fields, "expires_days")
        .unwrap_or("90")
        .parse::<u64>()
        .ok();
    let days = parsed.unwrap_or(90);
    let r = match parsed {
        Some(d) => {
            let b = CreateKey {
                name: name.clone(),
                scopes: (!chosen.is_empty()).then(|| chosen.clone()),
                expires_in_s: Some(d.saturating_mul(86_400)),
            };
            s.service.create_key(&v.caller, &b).await
        }
        None => Err(Error::invalid_body(
            "expires_days must be a whole number of days",
        )),
    };
    match r {
        Ok(k) => {
            let mut page = keys_page(&s, v, String::new(), &[], 90, String::new()).await?;
            page.chrome = page
                .chrome
                .with_notice("Key created. Copy it now: it is not shown again.");
            page.created = k.key;
            page.created_name = k.api_key.name;
            Ok(render(&page))
        }
        Err(e) if on_the_form(&e) => {
            let status = airlock_api::status_of(e.code);
            let page = keys_page(&s, v, name, &chosen, days, e.message).await?;
            Ok(render_status(status, &page))
        }
        Err(e) => Err(e.into()),
    }
}

async fn revoke_key(
    State(s): State<AppState>,
    Path(id): Path<String>,
    p: Posted<Empty>,
) -> Result<Response, UiError> {
    let v = &p.viewer;
    if !confirmed(&p.fields) {
        return Ok(confirm_page(
            &s,
            v,
            Nav::Keys,
            "Revoke this key?".into(),
            "Anything using it is refused from now on. This cannot be undone.",
            format!("/keys/{}/revoke", enc(&id)),
            "Revoke",
        )
        .await);
    }
    s.service.revoke_key(&v.caller, &id).await?;
    Ok(see_other("/keys?done=key-revoked"))
}

// ------------------------------------------------------------------ audit

#[derive(Debug)]
struct EventRow {
    seq: String,
    at: String,
    actor: String,
    kind: String,
    subject: String,
    result: String,
    data: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    verified: bool,
    verification: String,
    may_export: bool,
    rows: Vec<EventRow>,
    earlier: String,
    later: String,
    /// The filters as typed.
    event_type: String,
    actor: String,
    filtered: bool,
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default)]
    actor: Option<String>,
}

const AUDIT_PAGE: i64 = 100;

fn text_of(v: &serde_json::Value) -> String {
    format::strip_ansi(&format::scalar(v))
}

fn actor_of(v: &serde_json::Value) -> String {
    match (v["kind"].as_str(), v["id"].as_str()) {
        (Some(k), Some(id)) => format!("{k}: {id}"),
        (Some(k), None) => k.to_string(),
        _ => text_of(v),
    }
}

fn event_row(e: &serde_json::Value) -> EventRow {
    let subject = ["target", "run_id", "action_id"]
        .iter()
        .filter_map(|k| e[*k].as_str())
        .map(str::to_string)
        .collect::<Vec<_>>()
        .join(" · ");
    let result = [e["decision"].as_str(), e["result"].as_str()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" · ");
    let data = match &e["metadata"] {
        serde_json::Value::Object(m) if m.is_empty() => String::new(),
        serde_json::Value::Null => String::new(),
        m => format::clip(&format::strip_ansi(&m.to_string()), 300),
    };
    EventRow {
        seq: text_of(&e["seq"]),
        at: text_of(&e["at"]),
        actor: actor_of(&e["actor"]),
        kind: text_of(&e["event_type"]),
        subject: format::strip_ansi(&subject),
        result: format::strip_ansi(&result),
        data,
    }
}

/// The audit log, a page of events in sequence order (the latest page
/// unless `after` names where to start), under the result of verifying
/// the whole chain.
async fn audit(
    State(s): State<AppState>,
    v: Viewer,
    Query(q): Query<AuditQuery>,
) -> Result<Response, UiError> {
    let check = s.service.verify_audit(&v.caller).await?;
    // AUD-4: which signed checkpoint pinned the chain, or that none did.
    let pinned = match &check.checkpoint {
        Some(cp) => format!(
            " Checked against the signed checkpoint of event {} ({}).",
            cp.seq, cp.at
        ),
        None => " No signed checkpoint: removing the newest events would not show.".into(),
    };
    let (verified, verification) = if check.ok {
        (
            true,
            format!(
                "The chain verifies: {} events, head {}.{pinned}",
                check.events.unwrap_or(0),
                check.head.as_deref().unwrap_or("—")
            ),
        )
    } else if check.checkpoint_error.is_some() {
        (
            false,
            "A signed checkpoint does NOT verify (`airlock audit verify` on the server names it): \
             the log cannot be trusted."
                .to_string(),
        )
    } else {
        (
            false,
            match check.first_bad_seq {
                Some(n) => format!(
                    "The chain does NOT verify: event {n} does not match its hash, its predecessor \
                     or the signed checkpoint. Events from there on cannot be trusted.{pinned}"
                ),
                None => "The chain does NOT verify.".into(),
            },
        )
    };
    let event_type = q.event_type.unwrap_or_default().trim().to_string();
    let actor = q.actor.unwrap_or_default().trim().to_string();
    let filtered = !event_type.is_empty() || !actor.is_empty();
    let after = match q.after.as_deref() {
        // Unfiltered, the latest page; filtered, from the start.
        None | Some("") if !filtered => {
            let total = i64::try_from(check.events.unwrap_or(0)).unwrap_or(0);
            (total - AUDIT_PAGE).max(0)
        }
        None | Some("") => 0,
        Some(a) => a.parse::<i64>().map_err(|_| {
            UiError::Page(Error::new(
                ErrorCode::InvalidQuery,
                "after must be a whole number",
            ))
        })?,
    };
    // People are filtered by name; events name them by user id.
    let actor_id = if actor.is_empty() {
        None
    } else {
        let members = s.service.list_members(&v.caller).await;
        Some(
            members
                .ok()
                .and_then(|l| l.members.into_iter().find(|m| m.username == actor))
                .map(|m| m.user_id)
                .unwrap_or_else(|| actor.clone()),
        )
    };
    let page = s
        .service
        .list_audit(
            &v.caller,
            &ListAudit {
                after: Some(after),
                limit: Some(AUDIT_PAGE),
                event_type: (!event_type.is_empty()).then(|| event_type.clone()),
                actor: actor_id,
            },
        )
        .await?;
    let mut rows: Vec<EventRow> = page.events.iter().map(event_row).collect();
    // Newest first on the latest pages; a filtered search reads forward.
    if !filtered {
        rows.reverse();
    }
    let filters = if filtered {
        format!("&event_type={}&actor={}", enc(&event_type), enc(&actor))
    } else {
        String::new()
    };
    Ok(render(&AuditPage {
        chrome: Chrome::load(&s, &v, Nav::Audit, "Audit log").await,
        verified,
        verification,
        may_export: v.caller.may(Operation::ExportAudit),
        rows,
        // Filtered pages only go on (a filtered page holds the matches
        // of the events read, so there is no fixed step back).
        earlier: if after > 0 && !filtered {
            format!("/audit?after={}", (after - AUDIT_PAGE).max(0))
        } else {
            String::new()
        },
        later: page
            .next_cursor
            .map(|c| format!("/audit?after={c}{filters}"))
            .unwrap_or_default(),
        event_type,
        actor,
        filtered,
    }))
}
