//! The web interface's handler tests: the API's in-process harness (a
//! real service over a real SQLite store, no socket) with the interface's
//! routes mounted, and requests shaped as a browser sends them: cookies,
//! a same-origin form with its CSRF token in the `_csrf` field.

#![allow(dead_code)]

#[path = "../../../airlock-api/tests/common/mod.rs"]
pub mod common;

pub use common::*;

use axum::body::Body;
use axum::http::Request;

/// The host every request names (the same-origin check compares it).
pub const HOST: &str = "airlock.test";

/// A harness with the web interface mounted.
pub async fn ui() -> Harness {
    Harness::builder().ui(airlock_ui::router).build().await
}

/// A harness with the web interface and these workers.
pub async fn ui_with(workers: &[(&str, &str, &str)]) -> Harness {
    let mut b = Harness::builder().ui(airlock_ui::router);
    for (id, manifest, script) in workers {
        b = b.worker(id, manifest, script);
    }
    b.build().await
}

/// The `Cookie` header a browser holding `cred`'s session sends: the
/// session cookie and the CSRF token's cookie.
pub fn browser_cookies(cred: &Cred) -> String {
    match cred {
        Cred::Session { cookie, csrf } => format!("{cookie}; airlock_csrf={csrf}"),
        Cred::CookieOnly(c) => c.clone(),
        _ => String::new(),
    }
}

/// A page, as a browser asks for it.
pub async fn page(h: &Harness, cred: &Cred, path: &str) -> Resp {
    let mut b = Request::builder()
        .method("GET")
        .uri(path)
        .header("host", HOST)
        .header("sec-fetch-site", "same-origin");
    let c = browser_cookies(cred);
    if !c.is_empty() {
        b = b.header("cookie", c);
    }
    h.send(b.body(Body::empty()).unwrap()).await
}

/// A form sent from one of the interface's own pages: its CSRF token in
/// `_csrf` (unless `fields` brings its own `_csrf`).
pub async fn form(h: &Harness, cred: &Cred, path: &str, fields: &[(&str, &str)]) -> Resp {
    let mut all: Vec<(&str, &str)> = Vec::new();
    let csrf = match cred {
        Cred::Session { csrf, .. } => csrf.clone(),
        _ => String::new(),
    };
    if !fields.iter().any(|(k, _)| *k == "_csrf") && !csrf.is_empty() {
        all.push(("_csrf", &csrf));
    }
    all.extend_from_slice(fields);
    form_raw(h, cred, path, &all, &[("sec-fetch-site", "same-origin")]).await
}

/// A form with exactly these fields and extra headers (forgeries).
pub async fn form_raw(
    h: &Harness,
    cred: &Cred,
    path: &str,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Resp {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let mut b = Request::builder()
        .method("POST")
        .uri(path)
        .header("host", HOST)
        .header("content-type", "application/x-www-form-urlencoded");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let c = browser_cookies(cred);
    if !c.is_empty() {
        b = b.header("cookie", c);
    }
    h.send(b.body(Body::from(body)).unwrap()).await
}

/// Where a redirect points.
pub fn location(r: &Resp) -> &str {
    r.headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Asserts a page came with the interface's policy and headers.
pub fn assert_page_headers(r: &Resp) {
    let csp = r.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(r.headers["x-frame-options"], "DENY");
    assert_eq!(r.headers["cache-control"], "no-store");
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
}

/// Asserts the page's HTML has no inline script, inline handler or
/// `style=` attribute (the policy would block them; UI-2).
pub fn assert_no_inline_code(html: &str) {
    let lower = html.to_ascii_lowercase();
    for bad in [
        " style=",
        " onclick=",
        " onload=",
        " onerror=",
        " onsubmit=",
        " onchange=",
        "javascript:",
    ] {
        assert!(!lower.contains(bad), "the page has {bad:?}");
    }
    for (i, _) in lower.match_indices("<script") {
        let tag_end = lower[i..].find('>').map(|e| i + e).unwrap();
        assert!(
            lower[i..tag_end].contains(" src="),
            "an inline <script> at {i}"
        );
    }
}
