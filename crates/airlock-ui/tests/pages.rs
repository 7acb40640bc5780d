//! Handler tests of the sign-in, account and overview pages (UI-1, UI-2):
//! status, permission, CSRF refusal, escaping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use airlock_iam::Clock;
use axum::http::StatusCode;
use support::*;

#[tokio::test]
async fn a_signed_out_visitor_is_sent_to_sign_in_and_back() {
    let h = ui().await;
    let r = page(&h, &Cred::None, "/account?tab=sessions").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/sign-in?next=%2Faccount%3Ftab%3Dsessions");
    let r = page(&h, &Cred::None, "/sign-in?next=%2Fruns").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(
        r.text.contains(r#"name="next" value="/runs""#),
        "{}",
        r.text
    );
    // A `next` that leaves the site is dropped.
    let r = page(&h, &Cred::None, "/sign-in?next=%2F%2Fevil.example").await;
    assert!(r.text.contains(r#"name="next" value="/""#), "{}", r.text);
}

#[tokio::test]
async fn sign_in_sets_both_cookies_and_a_wrong_password_keeps_the_name() {
    let h = ui().await;
    h.bootstrap_owner().await;
    let r = form(
        &h,
        &Cred::None,
        "/sign-in",
        &[
            ("username", "owner"),
            ("password", "nope nope nope"),
            ("next", "/"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.text.contains(r#"value="owner""#), "{}", r.text);
    assert!(r.text.contains("role=\"alert\""));
    let r = form(
        &h,
        &Cred::None,
        "/sign-in",
        &[("username", "owner"), ("password", PW), ("next", "/runs")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), "/runs");
    let cookies: Vec<_> = r
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert!(
        cookies.iter().any(|c| c.starts_with("airlock_session=")
            && c.contains("HttpOnly")
            && c.contains("SameSite=Strict")),
        "{cookies:?}"
    );
    assert!(
        cookies.iter().any(|c| c.starts_with("airlock_csrf=")
            && c.contains("HttpOnly")
            && c.contains("SameSite=Strict")),
        "{cookies:?}"
    );
}

#[tokio::test]
async fn the_overview_shows_the_csrf_token_only_in_forms_and_escapes_names() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    let (_, csrf) = owner.parts();
    assert!(r.text.contains(&format!(r#"name="_csrf" value="{csrf}""#)));
    assert!(r.text.contains("Emergency stop"));
}

#[tokio::test]
async fn a_form_without_its_token_or_from_another_site_changes_nothing() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    // Positive control: with its token, the form works (signs out).
    // Without it, or from another site, it is refused and the session lives.
    let no_token = form_raw(
        &h,
        &owner,
        "/sign-out",
        &[],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN, "{}", no_token.text);
    assert!(no_token.text.contains("Nothing was changed"));
    let (_, csrf) = owner.parts();
    let cross = form_raw(
        &h,
        &owner,
        "/sign-out",
        &[("_csrf", &csrf)],
        &[("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    let wrong_origin = form_raw(
        &h,
        &owner,
        "/sign-out",
        &[("_csrf", &csrf)],
        &[("origin", "http://evil.example")],
    )
    .await;
    assert_eq!(wrong_origin.status, StatusCode::FORBIDDEN);
    assert_eq!(page(&h, &owner, "/").await.status, StatusCode::OK);
    let ok = form(&h, &owner, "/sign-out", &[]).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let after = page(&h, &owner, "/").await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    assert!(location(&after).starts_with("/sign-in"));
}

#[tokio::test]
async fn totp_enrolment_then_sign_in_needs_the_code() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let r = form(&h, &owner, "/account/totp", &[("password", PW)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("data:image/svg+xml;base64,"), "a QR code");
    let secret = r
        .text
        .split("id=\"totp-secret\">")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_string();
    use airlock_iam::totp;
    let key = totp::base32_decode(&secret).unwrap();
    let code = totp::code_at(
        &key,
        totp::Algorithm::Sha1,
        6,
        30,
        (h.clock.now_ms() / 1000) as u64,
    );
    let r = form(&h, &owner, "/account/totp/confirm", &[("code", &code)]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("id=\"recovery-codes\""));
    // A new sign-in now stops at the second factor.
    let r = form(
        &h,
        &Cred::None,
        "/sign-in",
        &[("username", "owner"), ("password", PW), ("next", "/runs")],
    )
    .await;
    assert_eq!(location(&r), "/sign-in/mfa?next=%2Fruns");
}

#[tokio::test]
async fn a_form_sent_after_its_session_ended_says_nothing_was_done() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    assert_eq!(
        form(&h, &owner, "/sign-out", &[]).await.status,
        StatusCode::SEE_OTHER
    );
    let r = form(&h, &owner, "/account/totp", &[("password", PW)]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    assert!(r.text.contains("nothing was done"), "{}", r.text);
    assert_page_headers(&r);
}

#[tokio::test]
async fn a_new_member_sets_a_password_with_the_token_and_signs_in() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/members/newbie",
            Some(serde_json::json!({"role": "viewer"})),
        )
        .await;
    let token = r.body["setup_token"].as_str().unwrap().to_string();
    let r = page(&h, &Cred::None, "/set-password").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    let pw = "a fresh long passphrase";
    // Mismatched passwords and a wrong token: refused on the page.
    let r = form(
        &h,
        &Cred::None,
        "/set-password",
        &[
            ("token", &token),
            ("password", pw),
            ("password_again", "other"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = form(
        &h,
        &Cred::None,
        "/set-password",
        &[
            ("token", "alr_wrong"),
            ("password", pw),
            ("password_again", pw),
        ],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert!(r.text.contains("role=\"alert\""));
    // Control: the real token sets it, once.
    let r = form(
        &h,
        &Cred::None,
        "/set-password",
        &[("token", &token), ("password", pw), ("password_again", pw)],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let r = form(
        &h,
        &Cred::None,
        "/sign-in",
        &[("username", "newbie"), ("password", pw), ("next", "/")],
    )
    .await;
    assert_eq!(location(&r), "/");
    let r = form(
        &h,
        &Cred::None,
        "/set-password",
        &[("token", &token), ("password", pw), ("password_again", pw)],
    )
    .await;
    assert!(r.status.is_client_error());
}
