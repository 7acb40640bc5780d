//! Handler tests of the workspace page (DUR-7): retention settings saved,
//! previewed and applied through the page; deletion with the name typed
//! again, the owner's only. A viewer sees no entry and forged forms change
//! nothing; an admin manages retention but is offered no deletion and a
//! forged one is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::http::StatusCode;
use serde_json::json;
use support::*;

/// `cred`'s browser with workspace `ws` chosen.
fn in_ws(cred: &Cred, ws: &str) -> Cred {
    match cred {
        Cred::Session { cookie, csrf } => Cred::Session {
            cookie: format!("{cookie}; airlock_ws={ws}"),
            csrf: csrf.clone(),
        },
        other => other.clone(),
    }
}

async fn retention(h: &Harness, who: &Cred) -> serde_json::Value {
    let r = h.call(who, "GET", "/v1/retention", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

/// How many audit events of `ty` the caller's workspace holds.
async fn events_of(h: &Harness, who: &Cred, ty: &str) -> usize {
    let r = h
        .call(
            who,
            "GET",
            &format!("/v1/audit?limit=500&event_type={ty}"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["events"].as_array().unwrap().len()
}

/// The names of the caller's workspaces.
async fn names(h: &Harness, who: &Cred) -> Vec<String> {
    let r = h.call(who, "GET", "/v1/workspaces", None).await;
    r.body["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workspace_name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn dur_7_retention_is_set_previewed_and_applied_from_the_workspace_page() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/settings").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(r.text.contains(r#"href="/settings""#), "nav entry");
    assert!(
        r.text.contains("Today everything is kept for ever"),
        "{}",
        r.text
    );
    // The workers folder's workspace cannot be deleted: no form is offered
    // (another workspace of the same owner has one, in the test below).
    assert!(!r.text.contains("/settings/delete"), "{}", r.text);

    // Saved: a field left empty keeps for ever.
    let r = form(
        &h,
        &owner,
        "/settings",
        &[
            ("runs_days", "30"),
            ("logs_days", ""),
            ("fires_days", " 7 "),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), "/settings?done=saved");
    let got = retention(&h, &owner).await;
    assert_eq!(got["runs_days"], 30, "{got}");
    assert_eq!(got["fires_days"], 7, "{got}");
    assert!(got["logs_days"].is_null(), "{got}");
    assert_eq!(events_of(&h, &owner, "retention.set").await, 1);
    let r = page(&h, &owner, "/settings?done=saved").await;
    assert!(r.text.contains(r#"value="30""#), "{}", r.text);
    assert!(r.text.contains("Retention saved"));
    assert!(!r.text.contains("Today everything is kept for ever"));

    // Bad values: refused beside the form, nothing stored. Control: the
    // stored settings are still the saved ones.
    for bad in ["abc", "0", "36501", "-3", "1.5"] {
        let r = form(&h, &owner, "/settings", &[("runs_days", bad)]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        assert!(r.text.contains(r#"id="form-error""#), "{bad}: {}", r.text);
        assert_eq!(retention(&h, &owner).await["runs_days"], 30, "{bad}");
    }
    let r = form(&h, &owner, "/settings", &[("runs_days", "<b>9</b>")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(!r.text.contains("<b>9"), "typed text is escaped");
    assert_eq!(events_of(&h, &owner, "retention.set").await, 1);

    // Preview: the counts, nothing removed. The pass asks first; confirmed,
    // it answers what it removed.
    let r = page(&h, &owner, "/settings?preview=1").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("A pass now would remove"), "{}", r.text);
    assert!(r.text.contains(r#"id="retention-counts""#));
    let r = form(&h, &owner, "/settings/retention/apply", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("Apply retention now?"), "{}", r.text);
    let r = form(
        &h,
        &owner,
        "/settings/retention/apply",
        &[("confirm", "yes")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("Retention applied."), "{}", r.text);
    assert!(r.text.contains("Removed"), "{}", r.text);
}

/// A viewer has no workspace entry, the page is refused, and forged
/// retention and deletion forms change nothing. Control: the same forms
/// from the owner do change things (the test above, and the deletion
/// below).
#[tokio::test]
async fn dur_7_a_viewer_gets_no_workspace_page_and_forged_forms_change_nothing() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let vic = h.member(&owner, "vic", "viewer").await;
    let r = page(&h, &vic, "/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains(r#"href="/settings""#), "{}", r.text);
    let r = page(&h, &owner, "/").await;
    assert!(r.text.contains(r#"href="/settings""#), "control");
    let r = page(&h, &vic, "/settings").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    for (path, fields) in [
        ("/settings", vec![("runs_days", "1")]),
        ("/settings/retention/apply", vec![("confirm", "yes")]),
        ("/settings/delete", vec![("confirm", "default")]),
    ] {
        let r = form(&h, &vic, path, &fields).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.text);
    }
    assert!(retention(&h, &owner).await["runs_days"].is_null());
    assert_eq!(events_of(&h, &owner, "retention.*").await, 0);
}

/// Deleting: the owner types the name; a wrong name is refused beside the
/// form; afterwards the person lands in another workspace and the deleted
/// one is gone from their list. An admin manages retention there but is
/// offered no deletion, and a forged one is refused.
#[tokio::test]
async fn dur_7_an_owner_deletes_a_workspace_from_its_page_and_an_admin_cannot() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let ada = h.member(&owner, "ada", "viewer").await;
    let ws = h.create_workspace(&owner, "doomed").await;
    let r = h
        .call_ws(
            &owner,
            "PUT",
            "/v1/members/ada",
            Some(json!({"role": "admin"})),
            Some(&ws),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let (owner_d, ada_d) = (in_ws(&owner, &ws), in_ws(&ada, &ws));

    let r = page(&h, &ada_d, "/settings").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("Workspace doomed"), "{}", r.text);
    assert!(r.text.contains(r#"id="retention-form""#));
    assert!(!r.text.contains("/settings/delete"), "no deletion offered");
    let r = form(&h, &ada_d, "/settings/delete", &[("confirm", "doomed")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);

    let r = page(&h, &owner_d, "/settings").await;
    assert!(
        r.text.contains(r#"action="/settings/delete""#),
        "{}",
        r.text
    );
    for wrong in ["", "Doomed", "doomed "] {
        let r = form(&h, &owner_d, "/settings/delete", &[("confirm", wrong)]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{wrong:?}: {}", r.text);
        assert!(r.text.contains(r#"id="delete-error""#), "{}", r.text);
    }
    assert!(
        names(&h, &owner).await.contains(&"doomed".to_string()),
        "control"
    );

    let r = form(&h, &owner_d, "/settings/delete", &[("confirm", "doomed")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), "/?done=workspace-deleted");
    let r = page(&h, &owner_d, "/?done=workspace-deleted").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("The workspace was deleted"), "{}", r.text);
    assert!(!names(&h, &owner).await.contains(&"doomed".to_string()));
}
