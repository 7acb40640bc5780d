//! Handler tests of the administration pages (UI-1, UI-2): secrets,
//! members, API keys and the audit log. Status, permission (a viewer sees
//! no form it may not use, and a forged form is refused with nothing
//! changed), CSRF refusal, escaping, and secret values never in any page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::http::StatusCode;
use support::*;

const MAILER: &str = "[worker]\nid = \"mailer\"\ntitle = \"mailer\"\ndescription = \"test\"\n\
                      kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\n\
                      [secrets]\nnames = [\"API_TOKEN\"]\n";

/// A value no page may ever contain (nor any part of it).
const VALUE: &str = "s3cr3t-VALUE-<script>alert(1)</script>-zz";
const VALUE_MARK: &str = "s3cr3t-VALUE";

async fn harness() -> Harness {
    ui_with(&[("mailer", MAILER, ECHO)]).await
}

const PAGES: [&str; 8] = [
    "/",
    "/secrets",
    "/members",
    "/keys",
    "/audit",
    "/approvals",
    "/account",
    "/secrets?done=secret-saved",
];

async fn secret_version(h: &Harness, who: &Cred, name: &str) -> i64 {
    let r = h.call(who, "GET", "/v1/secrets", None).await;
    r.body["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .map(|s| s["version"].as_i64().unwrap())
        .unwrap_or(-1)
}

#[tokio::test]
async fn every_admin_page_renders_for_an_owner() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    for path in ["/secrets", "/members", "/keys", "/audit", "/audit?after=0"] {
        let r = page(&h, &owner, path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
        assert_page_headers(&r);
        assert_no_inline_code(&r.text);
        assert!(r.text.contains("aria-current=\"page\""), "{path}");
    }
    let r = page(&h, &owner, "/audit").await;
    assert!(r.text.contains("The chain verifies"), "{}", r.text);
    assert!(r.text.contains(r#"href="/v1/audit/export""#));
    assert!(r.text.contains("member.added") || r.text.contains("bootstrap"));
    let r = page(&h, &owner, "/audit?after=abc").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // The export link works with the session cookie.
    let r = page(&h, &owner, "/v1/audit/export").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn a_secret_is_write_only_and_its_value_is_never_in_any_page() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/secrets").await;
    assert!(
        r.text.contains("API_TOKEN") && r.text.contains("missing"),
        "{}",
        r.text
    );
    assert!(r.text.contains("mailer"), "used by: {}", r.text);

    // A bad name: refused beside the form, the name kept (escaped), the
    // value dropped.
    let r = form(
        &h,
        &owner,
        "/secrets",
        &[("name", "<script>x</script>"), ("value", VALUE)],
    )
    .await;
    assert!(r.status.is_client_error(), "{}: {}", r.status, r.text);
    assert!(r.text.contains("role=\"alert\""));
    assert!(r.text.contains("&#60;script&#62;x"), "{}", r.text);
    assert!(!r.text.contains("<script>x"));
    assert!(!r.text.contains(VALUE_MARK), "{}", r.text);
    // An empty value: refused.
    let r = form(
        &h,
        &owner,
        "/secrets",
        &[("name", "API_TOKEN"), ("value", "")],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, 0);
    // Without the CSRF token: refused, nothing stored.
    let r = form_raw(
        &h,
        &owner,
        "/secrets",
        &[("name", "API_TOKEN"), ("value", VALUE)],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(!r.text.contains(VALUE_MARK));
    assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, 0);

    // Set, then rotate.
    for v in [1, 2] {
        let r = form(
            &h,
            &owner,
            "/secrets",
            &[("name", "API_TOKEN"), ("value", VALUE)],
        )
        .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
        assert_eq!(location(&r), "/secrets?done=secret-saved");
        assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, v);
    }
    let r = page(&h, &owner, "/secrets?done=secret-saved").await;
    assert!(r.text.contains("set (version 2)"), "{}", r.text);
    assert!(
        r.text
            .contains(r#"href="/secrets?name=API_TOKEN#set-h">Rotate"#)
    );
    let r = page(&h, &owner, "/secrets?name=API_TOKEN").await;
    assert!(
        r.text.contains(r#"name="name" value="API_TOKEN""#),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains(r#"aria-describedby="secret-value-help"></textarea>"#),
        "an empty value field"
    );
    for path in PAGES {
        let r = page(&h, &owner, path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(!r.text.contains(VALUE_MARK), "{path} shows the value");
    }

    // Delete asks first; confirmed, it is gone (still declared).
    let r = form(&h, &owner, "/secrets/API_TOKEN/delete", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"name="confirm" value="yes""#));
    assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, 2);
    let r = form(
        &h,
        &owner,
        "/secrets/API_TOKEN/delete",
        &[("confirm", "yes")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, 0);
}

#[tokio::test]
async fn a_viewer_sees_no_admin_forms_and_forged_ones_change_nothing() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let vic = h.member(&owner, "vic", "viewer").await;
    let r = page(&h, &vic, "/").await;
    assert!(!r.text.contains(r#"href="/secrets""#), "no secrets entry");
    assert!(!r.text.contains(r#"href="/audit""#), "no audit entry");
    for path in ["/secrets", "/audit"] {
        let r = page(&h, &vic, path).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
        assert_page_headers(&r);
    }
    let r = page(&h, &vic, "/members").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains(r#"action="/members""#), "{}", r.text);
    assert!(!r.text.contains("/remove\""));

    let forged: [(&str, Vec<(&str, &str)>); 4] = [
        ("/secrets", vec![("name", "API_TOKEN"), ("value", VALUE)]),
        ("/members", vec![("username", "vic"), ("role", "owner")]),
        (
            "/members",
            vec![("username", "mallory"), ("role", "viewer")],
        ),
        ("/members/owner/remove", vec![("confirm", "yes")]),
    ];
    for (path, fields) in forged {
        let r = form(&h, &vic, path, &fields).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.text);
        assert!(!r.text.contains(VALUE_MARK));
    }
    assert_eq!(secret_version(&h, &owner, "API_TOKEN").await, 0);
    let r = h.call(&owner, "GET", "/v1/members", None).await;
    let members = r.body["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{}", r.body);
    assert!(
        members
            .iter()
            .any(|m| m["username"] == "vic" && m["role"] == "viewer")
    );
}

#[tokio::test]
async fn members_are_added_changed_and_removed_with_confirmation() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/members").await;
    assert!(r.text.contains(r#"action="/members""#));
    assert!(r.text.contains("assistant_manager"), "the role table");

    // A new account: its one-time token is shown on this answer.
    let r = form(
        &h,
        &owner,
        "/members",
        &[("username", "carol"), ("role", "developer")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains(r#"id="setup-token""#), "{}", r.text);
    let r = page(&h, &owner, "/members").await;
    assert!(r.text.contains("carol") && !r.text.contains(r#"id="setup-token""#));

    // A change of role.
    let r = form(
        &h,
        &owner,
        "/members",
        &[("username", "carol"), ("role", "viewer")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let m = h.call(&owner, "GET", "/v1/members", None).await.body;
    assert!(
        m["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["username"] == "carol" && m["role"] == "viewer")
    );

    // Hostile and bad input: refused on the page, escaped, kept.
    let r = form(
        &h,
        &owner,
        "/members",
        &[
            ("username", "<script>alert(1)</script>"),
            ("role", "viewer"),
        ],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert!(!r.text.contains("<script>alert(1)"));
    assert!(r.text.contains("&#60;script&#62;alert(1)"), "{}", r.text);
    let r = form(
        &h,
        &owner,
        "/members",
        &[("username", "dave"), ("role", "emperor")],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert!(r.text.contains("role=\"alert\""));
    // The last owner stays.
    let r = form(&h, &owner, "/members/owner/remove", &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("at least one owner"), "{}", r.text);
    // Without the CSRF token: refused.
    let r = form_raw(
        &h,
        &owner,
        "/members/carol/remove",
        &[("confirm", "yes")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Removing asks first.
    let r = form(&h, &owner, "/members/carol/remove", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"name="confirm" value="yes""#));
    let r = form(&h, &owner, "/members/carol/remove", &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let m = h.call(&owner, "GET", "/v1/members", None).await.body;
    assert_eq!(m["members"].as_array().unwrap().len(), 1, "{m}");
}

#[tokio::test]
async fn a_key_made_on_the_page_is_shown_once_works_and_is_revoked() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let vic = h.member(&owner, "vic", "viewer").await;
    let r = page(&h, &vic, "/keys").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"value="keys.own""#), "{}", r.text);
    assert!(
        !r.text.contains(r#"value="secrets.write""#),
        "not the viewer's"
    );

    let r = form(
        &h,
        &owner,
        "/keys",
        &[
            ("name", "ci <b>"),
            ("scope", "runs.read"),
            ("scope", "workers.read"),
            ("expires_days", "30"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    let key = r
        .text
        .split(r#"<pre id="new-key">"#)
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_string();
    assert!(key.len() > 20, "{key}");
    assert!(r.text.contains("data-copy=\"#new-key\""));
    assert!(r.text.contains("ci &#60;b&#62;"));
    let list = page(&h, &owner, "/keys").await;
    assert!(!list.text.contains(&key), "shown once");
    assert!(
        list.text.contains("workers.read, runs.read"),
        "{}",
        list.text
    );
    let k = Cred::Key(key.clone());
    assert_eq!(
        h.call(&k, "GET", "/v1/workers", None).await.status,
        StatusCode::OK
    );

    // Bad input: kept and explained; a scope the person lacks: refused.
    let r = form(
        &h,
        &owner,
        "/keys",
        &[("name", "x"), ("expires_days", "forever")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains(r#"value="x""#));
    let r = form(
        &h,
        &vic,
        "/keys",
        &[("name", "sneaky"), ("scope", "secrets.write")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert!(!r.text.contains(r#"<pre id="new-key">"#));

    // Revoke asks first, then the key stops working.
    let id = h.call(&owner, "GET", "/v1/keys", None).await.body["api_keys"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/keys/{id}/revoke");
    let r = form(&h, &owner, &path, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"name="confirm" value="yes""#));
    // Someone else's key is not theirs to revoke.
    let r = form(&h, &vic, &path, &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert_eq!(
        h.call(&k, "GET", "/v1/workers", None).await.status,
        StatusCode::OK
    );
    let r = form_raw(
        &h,
        &owner,
        &path,
        &[("confirm", "yes")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = form(&h, &owner, &path, &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(
        h.call(&k, "GET", "/v1/workers", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let list = page(&h, &owner, "/keys?done=key-revoked").await;
    assert!(list.text.contains("Key revoked."));
    assert!(
        !list.text.contains(&path),
        "no revoke button on a revoked key"
    );
}

#[tokio::test]
async fn the_audit_log_filters_by_type_and_actor_and_escapes_them() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    h.member(&owner, "vic", "viewer").await;
    let r = form(&h, &owner, "/keys", &[("name", "k")]).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = page(&h, &owner, "/audit?event_type=api_key.*&actor=owner").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(r.text.contains("api_key.created"), "{}", r.text);
    assert!(!r.text.contains("member.added"), "{}", r.text);
    assert!(r.text.contains(r#"value="api_key.*""#));
    let r = page(&h, &owner, "/audit?event_type=member.added").await;
    assert!(r.text.contains("member.added") && !r.text.contains("api_key.created"));
    let r = page(&h, &owner, "/audit?actor=vic").await;
    assert!(r.text.contains("No events match"), "{}", r.text);
    let r = page(
        &h,
        &owner,
        "/audit?event_type=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains("<script>alert(1)"));
    assert!(r.text.contains("&#60;script&#62;alert(1)"));
    let long = "x".repeat(200);
    let r = page(&h, &owner, &format!("/audit?actor={long}")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}
