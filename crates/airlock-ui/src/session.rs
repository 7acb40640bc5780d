//! Who is looking at a page, as the browser tells it: the session cookie
//! (authenticated by the service, exactly as the API does), the CSRF
//! token's cookie (only to write it into forms), the workspace and theme
//! the person chose. State changes arrive as [`Posted`] forms whose CSRF
//! token comes from a hidden field (or, from `app.js`, the
//! `X-CSRF-Token` header), never from the cookie: another site can make a
//! browser send cookies, but it cannot read a page to learn the token.

use airlock_api::AppState;
use airlock_api::auth::{CSRF_HEADER, authenticate_credential, cookie};
use airlock_protocol::{Error, ErrorCode};
use airlock_service::{Caller, ClientInfo, Credential, Principal};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::page::UiError;

/// The cookie holding the workspace a person chose (an id; not a secret:
/// the service checks membership on every request).
pub const WORKSPACE_COOKIE: &str = "airlock_ws";
/// The cookie holding the chosen theme (`light`, `dark` or `system`).
pub const THEME_COOKIE: &str = "airlock_theme";
/// The hidden form field that carries the CSRF token.
pub const CSRF_FIELD: &str = "_csrf";
/// The largest form body read (a run form with long text inputs fits).
pub const MAX_FORM_BYTES: usize = 1 << 20;

/// Light, dark, or whatever the system prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theme {
    System,
    Light,
    Dark,
}

impl Theme {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "system" => Some(Self::System),
            "light" => Some(Self::Light),
            "dark" => Some(Self::Dark),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Light => "light",
            Self::Dark => "dark",
        }
    }

    pub fn of(headers: &HeaderMap) -> Self {
        cookie(headers, THEME_COOKIE)
            .and_then(|v| Self::parse(&v))
            .unwrap_or(Self::System)
    }
}

/// A signed-in person (their second factor done) acting in a workspace.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub caller: Caller,
    /// The session's CSRF token as its cookie holds it, written into every
    /// form of the page (empty when the cookie is missing; the service
    /// then refuses the form, and the page says to sign in again).
    pub csrf: String,
    pub theme: Theme,
    /// The path and query of this request (where sign-in comes back to).
    pub here: String,
}

impl Viewer {
    pub fn principal(&self) -> Option<&Principal> {
        self.caller.principal()
    }

    pub fn username(&self) -> &str {
        self.principal()
            .map(|p| p.user.username.as_str())
            .unwrap_or("")
    }
}

/// What the request says about the client (as the API's `Client`).
pub fn client_info(s: &AppState, parts: &Parts) -> ClientInfo {
    ClientInfo {
        ip: s.http.client_ip(parts).map(|i| i.to_string()),
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(200).collect()),
        session_token: s.http.session_token(&parts.headers),
    }
}

fn here(parts: &Parts) -> String {
    parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into())
}

/// Authenticates the session cookie with `csrf` (for a state change) and
/// resolves the chosen workspace. No cookie or a dead session sends the
/// person to sign in; a session that owes its second factor, to that step.
async fn viewer(
    s: &AppState,
    parts: &Parts,
    csrf: Option<String>,
    changes_state: bool,
    back_to: String,
) -> Result<Viewer, UiError> {
    let Some(token) = s.http.session_token(&parts.headers) else {
        return Err(UiError::SignIn { next: back_to });
    };
    let cred = Credential::Session {
        token,
        csrf,
        changes_state,
    };
    let p = match authenticate_credential(s, parts, cred, false).await {
        Ok(p) => p,
        Err(e) => {
            return Err(match e.0.code {
                ErrorCode::Unauthenticated => UiError::SignIn { next: back_to },
                ErrorCode::MfaRequired => UiError::SecondFactor,
                _ => UiError::Page(e.0),
            });
        }
    };
    let chosen = cookie(&parts.headers, WORKSPACE_COOKIE);
    let caller = match s.service.caller(p.clone(), chosen.as_deref()).await {
        Ok(c) => c,
        // A workspace the person left (or never had): their first one.
        Err(e) if chosen.is_some() && e.code == ErrorCode::NotFound => {
            s.service.caller(p, None).await?
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Viewer {
        caller,
        csrf: s.http.csrf_token(&parts.headers).unwrap_or_default(),
        theme: Theme::of(&parts.headers),
        here: here(parts),
    })
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = UiError;
    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, UiError> {
        let back = here(parts);
        viewer(s, parts, None, false, back).await
    }
}

/// Refuses a state change another site started: a browser names the
/// requesting site in `Sec-Fetch-Site` (or, older ones, `Origin`); when it
/// does, it must be this one. Clients that send neither still need the
/// CSRF token.
pub fn same_origin(headers: &HeaderMap) -> Result<(), Error> {
    let refused = match headers.get("sec-fetch-site").map(|v| v.to_str()) {
        Some(Ok(site)) => !matches!(site, "same-origin" | "none"),
        Some(Err(_)) => true,
        None => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
            match headers.get(header::ORIGIN).map(|v| v.to_str()) {
                Some(Ok(o)) => {
                    let authority = o
                        .strip_prefix("http://")
                        .or_else(|| o.strip_prefix("https://"));
                    authority.is_none() || authority != host
                }
                Some(Err(_)) => true,
                None => false,
            }
        }
    };
    if refused {
        return Err(Error::new(
            ErrorCode::CsrfFailed,
            "this form was sent from another site",
        ));
    }
    Ok(())
}

/// The person who sent a form, authenticated as a state change with the
/// form's CSRF token. A session that ended while the form was open is
/// said so on a page (nothing was done; signing in again comes back to
/// the page the form was on) instead of a silent redirect away from it.
async fn form_viewer(s: &AppState, parts: &Parts, csrf: Option<String>) -> Result<Viewer, UiError> {
    let back = referer_path(&parts.headers).unwrap_or_else(|| "/".into());
    match viewer(s, parts, csrf, true, back).await {
        Err(UiError::SignIn { next }) => Err(UiError::SessionEnded { next }),
        other => other,
    }
}

/// The fields of an `application/x-www-form-urlencoded` body, in order
/// (bounded by [`MAX_FORM_BYTES`]).
pub async fn form_fields(req: Request) -> Result<(Parts, Vec<(String, String)>), UiError> {
    let (parts, body) = req.into_parts();
    let is_form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(UiError::Page(Error::new(
            ErrorCode::UnsupportedMediaType,
            "this page takes an HTML form",
        )));
    }
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| {
            UiError::Page(Error::new(
                ErrorCode::BodyTooLarge,
                format!("the form is larger than {} KiB", MAX_FORM_BYTES / 1024),
            ))
        })?;
    let fields = form_urlencoded::parse(&bytes).into_owned().collect();
    Ok((parts, fields))
}

/// A form a signed-in person sent: authenticated as a state change with
/// the CSRF token from its `_csrf` field (or the `X-CSRF-Token` header),
/// from this origin only. `T` is read from the other fields; the raw
/// fields stay available for pages that re-show what was typed.
#[derive(Debug)]
pub struct Posted<T> {
    pub viewer: Viewer,
    pub form: T,
    pub fields: Vec<(String, String)>,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for Posted<T> {
    type Rejection = UiError;
    async fn from_request(req: Request, s: &AppState) -> Result<Self, UiError> {
        let (parts, fields) = form_fields(req).await?;
        same_origin(&parts.headers)?;
        let csrf = field(&fields, CSRF_FIELD).map(str::to_string).or_else(|| {
            parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
        let viewer = form_viewer(s, &parts, csrf).await?;
        let rest: Vec<(&str, &str)> = fields
            .iter()
            .filter(|(k, _)| k != CSRF_FIELD)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let encoded = serde_urlencoded::to_string(&rest)
            .map_err(|e| Error::new(ErrorCode::InvalidRequest, e.to_string()))?;
        let form = serde_urlencoded::from_str(&encoded).map_err(|e| {
            UiError::Page(Error::new(
                ErrorCode::InvalidRequest,
                format!("the form is not as expected: {e}"),
            ))
        })?;
        Ok(Self {
            viewer,
            form,
            fields,
        })
    }
}

/// A `multipart/form-data` form a signed-in person sent (the run form of a
/// worker with a file input): authenticated exactly as [`Posted`] is —
/// from this origin only, the session with the CSRF token as a state
/// change — before anything but the token is read. The token must be the
/// form's first field (`_csrf`, as every form here puts it) or the
/// `X-CSRF-Token` header. The rest of the body is left to the handler, which
/// knows how large each field may be; the route's body limit bounds it all.
pub struct PostedMultipart {
    pub viewer: Viewer,
    /// The fields after `_csrf`, not yet read.
    pub rest: axum::extract::Multipart,
}

impl std::fmt::Debug for PostedMultipart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostedMultipart")
            .field("viewer", &self.viewer)
            .finish_non_exhaustive()
    }
}

/// Whether a request's body is `multipart/form-data`.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"))
}

impl FromRequest<AppState> for PostedMultipart {
    type Rejection = UiError;
    async fn from_request(req: Request, s: &AppState) -> Result<Self, UiError> {
        let (parts, body) = req.into_parts();
        same_origin(&parts.headers)?;
        if !is_multipart(&parts.headers) {
            return Err(UiError::Page(Error::new(
                ErrorCode::UnsupportedMediaType,
                "this page takes an HTML form",
            )));
        }
        // The body goes to the multipart reader with the headers (the
        // boundary) and the route's body limit; `parts` stays for the
        // authentication.
        let mut inner = Request::new(body);
        *inner.headers_mut() = parts.headers.clone();
        *inner.extensions_mut() = parts.extensions.clone();
        let bad = |m: String| UiError::Page(Error::new(ErrorCode::InvalidRequest, m));
        let mut rest = axum::extract::Multipart::from_request(inner, s)
            .await
            .map_err(|e| bad(format!("the form is not as expected: {e}")))?;
        let header_csrf = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let csrf = match header_csrf {
            Some(t) => Some(t),
            None => {
                let first = rest
                    .next_field()
                    .await
                    .map_err(|e| bad(format!("the form is not as expected: {e}")))?;
                match first {
                    Some(f) if f.name() == Some(CSRF_FIELD) && f.file_name().is_none() => {
                        let mut token = Vec::new();
                        let mut f = f;
                        while let Some(chunk) = f
                            .chunk()
                            .await
                            .map_err(|e| bad(format!("the form is not as expected: {e}")))?
                        {
                            token.extend_from_slice(&chunk);
                            if token.len() > 256 {
                                return Err(bad("the form's token is too long".into()));
                            }
                        }
                        String::from_utf8(token).ok()
                    }
                    _ => None,
                }
            }
        };
        let viewer = form_viewer(s, &parts, csrf).await?;
        Ok(Self { viewer, rest })
    }
}

/// The first value of field `name`.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The path of a same-origin `Referer`, if the browser sent one.
pub fn referer_path(headers: &HeaderMap) -> Option<String> {
    let r = headers.get(header::REFERER)?.to_str().ok()?;
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let rest = r
        .strip_prefix("http://")
        .or_else(|| r.strip_prefix("https://"))?;
    let path = rest.strip_prefix(host)?;
    safe_next(path).map(str::to_string)
}

/// `next` if it is a path on this site (`/…`, not `//…` or `/\…`), so a
/// sign-in link cannot send a person elsewhere.
pub fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.len() <= 2048
        && !next.chars().any(|c| c.is_control());
    ok.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next("/runs?state=failed"), Some("/runs?state=failed"));
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "javascript:alert(1)",
            "",
            "/a\nb",
        ] {
            assert_eq!(safe_next(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_cross_site_form_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8000".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://127.0.0.1:8000".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(same_origin(&h).is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(same_origin(&h).is_err());
        h.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        // A browser's own word wins over an opaque origin.
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        h.remove("sec-fetch-site");
        assert!(same_origin(&h).is_err());
    }
}
