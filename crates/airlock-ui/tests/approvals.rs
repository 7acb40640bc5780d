//! Handler tests of the approvals inbox, one approval's page and its
//! decision, and the emergency stop (UI-1, UI-2, AGT-5, AGT-6): status,
//! permission (a viewer sees no button and a forged form is refused with
//! nothing changed), CSRF refusal, escaping, the decision bound to the
//! payload hash the person saw.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use support::*;

const GATED: &str = "[worker]\nid = \"gated\"\ntitle = \"gated\"\ndescription = \"test\"\n\
                     kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\
                     [approvals]\nrequired = true\n\
                     reason = \"sends <script>alert(1)</script> mail\"\nttl_s = 60\n";

async fn harness() -> Harness {
    Harness::builder()
        .ui(airlock_ui::router)
        .worker("gated", GATED, ECHO)
        .launcher(Arc::new(airlock_launch::RecordingLauncher::succeeding()))
        .build()
        .await
}

/// Starts a run of `gated` as `who`; returns (run id, approval id).
async fn gated_run(h: &Harness, who: &Cred) -> (String, String) {
    let r = h
        .call(who, "POST", "/v1/workers/gated/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let run = r.body["run"]["id"].as_str().unwrap().to_string();
    let l = h
        .call(who, "GET", &format!("/v1/approvals?run={run}"), None)
        .await;
    let id = l.body["approvals"][0]["id"].as_str().unwrap().to_string();
    (run, id)
}

async fn approval(h: &Harness, who: &Cred, id: &str) -> serde_json::Value {
    let r = h
        .call(who, "GET", &format!("/v1/approvals/{id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body
}

/// The hidden `payload_hash` the page put in its approve form.
fn form_hash(html: &str) -> String {
    html.split(r#"name="payload_hash" value=""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_and_an_approval_show_the_payload_hash_and_reason_escaped() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let (run, id) = gated_run(&h, &owner).await;
    let a = approval(&h, &owner, &id).await;
    let hash = a["payload_hash"].as_str().unwrap();

    let r = page(&h, &owner, "/approvals").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(r.text.contains(&format!("/approvals/{id}")), "{}", r.text);
    assert!(r.text.contains(&format!("/runs/{run}")));
    assert!(r.text.contains("aria-label=\"1 pending\""), "the badge");
    assert!(!r.text.contains("<script>alert(1)"), "escaped");
    assert!(r.text.contains("&#60;script&#62;alert(1)"), "{}", r.text);

    // History tabs and a bad state.
    let r = page(&h, &owner, "/approvals?state=rejected").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("No rejected approvals"), "{}", r.text);
    let r = page(&h, &owner, "/approvals?state=nope").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_page_headers(&r);

    let r = page(&h, &owner, &format!("/approvals/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(r.text.contains(&format!(r#"id="payload-hash">{hash}<"#)));
    assert_eq!(form_hash(&r.text), hash);
    assert!(r.text.contains("<pre id=\"payload\">"));
    assert!(r.text.contains("&#60;script&#62;alert(1)"));
    assert!(!r.text.contains("<script>alert(1)"));
    assert!(r.text.contains(r#"id="approve""#) && r.text.contains(r#"id="reject""#));

    let r = page(&h, &owner, "/approvals/apr_missing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_binds_the_hash_refuses_self_approval_and_records_the_note() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let alice = h.member(&owner, "alice", "human_assistant").await;
    let (_run, id) = gated_run(&h, &owner).await;
    let html = page(&h, &alice, &format!("/approvals/{id}")).await.text;
    let hash = form_hash(&html);
    let url = format!("/approvals/{id}/approve");

    // The owner started the run: refused on the page, the note kept.
    let r = form(
        &h,
        &owner,
        &url,
        &[("payload_hash", &hash), ("note", "mine <b>")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_page_headers(&r);
    assert!(r.text.contains("Self-approval refused"), "{}", r.text);
    assert!(r.text.contains("role=\"alert\""));
    assert!(r.text.contains("mine &#60;b&#62;</textarea>"), "{}", r.text);

    // Another payload than the one shown: refused.
    let other = "0".repeat(64);
    let r = form(&h, &alice, &url, &[("payload_hash", &other)]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("payload changed"), "{}", r.text);
    // Without the hash the form is not accepted either.
    let r = form(&h, &alice, &url, &[("note", "x")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // A note too long, a grant that does not exist.
    let long = "n".repeat(1001);
    let r = form(
        &h,
        &alice,
        &url,
        &[("payload_hash", &hash), ("note", &long)],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = form(
        &h,
        &alice,
        &url,
        &[("payload_hash", &hash), ("grant", "forever")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // Without the CSRF token: refused.
    let r = form_raw(
        &h,
        &alice,
        &url,
        &[("payload_hash", &hash)],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(approval(&h, &owner, &id).await["state"], "pending");

    // Positive control: the hash the page showed, by another member.
    let r = form(
        &h,
        &alice,
        &url,
        &[("payload_hash", &hash), ("note", "looks right")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), format!("/approvals/{id}?done=approved"));
    let a = approval(&h, &owner, &id).await;
    assert!(a["state"] == "approved" || a["state"] == "consumed", "{a}");
    assert_eq!(a["note"], "looks right");
    assert!(a["decided_by"].as_str().is_some_and(|b| !b.is_empty()));
    let r = page(&h, &alice, location(&r)).await;
    assert!(r.text.contains("looks right") && r.text.contains("Approved."));
    assert!(!r.text.contains(r#"id="approve""#), "decided: no buttons");

    // Deciding again: already decided, said on the page.
    let r = form(&h, &alice, &format!("/approvals/{id}/reject"), &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("already decided"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejecting_and_an_expired_request_end_in_the_right_state() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let alice = h.member(&owner, "alice", "human_assistant").await;
    let (run, id) = gated_run(&h, &owner).await;
    let r = form(
        &h,
        &alice,
        &format!("/approvals/{id}/reject"),
        &[("note", "not today")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let a = approval(&h, &owner, &id).await;
    assert_eq!(a["state"], "rejected");
    assert_eq!(a["note"], "not today");
    let r = page(&h, &owner, "/approvals?state=rejected").await;
    assert!(r.text.contains(&format!("/approvals/{id}")), "history");
    let r = h
        .call(&owner, "GET", &format!("/v1/runs/{run}"), None)
        .await;
    assert_ne!(r.body["run"]["state"], "awaiting_approval");
    // The run's page names who decided (a person, not a user id).
    let r = page(&h, &owner, &format!("/runs/{run}")).await;
    assert!(r.text.contains("decided by alice"), "{}", r.text);
    let by = a["decided_by"].as_str().unwrap();
    assert!(!r.text.contains(by), "the decider shown by id: {}", r.text);

    let (_, id2) = gated_run(&h, &owner).await;
    let html = page(&h, &alice, &format!("/approvals/{id2}")).await.text;
    let hash = form_hash(&html);
    h.clock.advance(Duration::from_secs(120));
    let r = form(
        &h,
        &alice,
        &format!("/approvals/{id2}/approve"),
        &[("payload_hash", &hash)],
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("expired"), "{}", r.text);
    assert_ne!(approval(&h, &owner, &id2).await["state"], "approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_decision_buttons_and_a_forged_decision_is_refused() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let vic = h.member(&owner, "vic", "viewer").await;
    let (_, id) = gated_run(&h, &owner).await;
    let r = page(&h, &vic, &format!("/approvals/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!r.text.contains(r#"id="approve""#), "{}", r.text);
    assert!(!r.text.contains("/approve\""));
    assert!(!r.text.contains("Emergency stop"), "a viewer may not stop");
    let hash = approval(&h, &owner, &id).await["payload_hash"]
        .as_str()
        .unwrap()
        .to_string();
    for path in [
        format!("/approvals/{id}/approve"),
        format!("/approvals/{id}/reject"),
    ] {
        let r = form(&h, &vic, &path, &[("payload_hash", &hash)]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.text);
        assert_page_headers(&r);
    }
    assert_eq!(approval(&h, &owner, &id).await["state"], "pending");
}

async fn stopped(h: &Harness, who: &Cred) -> serde_json::Value {
    h.call(who, "GET", "/v1/emergency-stop", None).await.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emergency_stop_asks_first_then_stops_shows_the_banner_and_resumes() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let vic = h.member(&owner, "vic", "viewer").await;
    let (_, id) = gated_run(&h, &owner).await;

    // Without confirm=yes: a confirmation page, nothing stopped.
    let r = form(
        &h,
        &owner,
        "/emergency/stop",
        &[("reason", "runaway <script>x</script>")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(
        r.text.contains(r#"name="confirm" value="yes""#),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#"name="reason""#));
    assert!(r.text.contains("runaway &#60;script&#62;"));
    assert_eq!(stopped(&h, &owner).await["stopped"], false);

    // Without the CSRF token, or by a viewer: refused, nothing stopped.
    let r = form_raw(
        &h,
        &owner,
        "/emergency/stop",
        &[("confirm", "yes")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = form(&h, &vic, "/emergency/stop", &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(stopped(&h, &owner).await["stopped"], false);
    // A reason with a control character: the confirmation again, with why.
    let r = form(
        &h,
        &owner,
        "/emergency/stop",
        &[("confirm", "yes"), ("reason", "a\u{7}b")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("role=\"alert\""));
    assert_eq!(stopped(&h, &owner).await["stopped"], false);

    // Confirmed: stopped, back to where the form was sent from.
    let r = form(
        &h,
        &owner,
        "/emergency/stop",
        &[
            ("confirm", "yes"),
            ("reason", "runaway <script>x</script>"),
            ("next", "/approvals"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), "/approvals");
    assert_eq!(stopped(&h, &owner).await["stopped"], true);
    assert_eq!(approval(&h, &owner, &id).await["state"], "cancelled");
    for path in ["/", "/approvals", "/secrets", "/members", "/keys", "/audit"] {
        let r = page(&h, &owner, path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(r.text.contains(r#"id="emergency-banner""#), "{path}");
        assert!(r.text.contains("runaway &#60;script&#62;"), "{path}");
        assert!(r.text.contains(r#"id="emergency-resume""#), "{path}");
    }
    let r = page(&h, &vic, "/").await;
    assert!(r.text.contains(r#"id="emergency-banner""#));
    assert!(!r.text.contains(r#"id="emergency-resume""#), "a viewer");
    let r = form(&h, &vic, "/emergency/resume", &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // Resume asks first too, then resumes.
    let r = form(&h, &owner, "/emergency/resume", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"name="confirm" value="yes""#));
    assert_eq!(stopped(&h, &owner).await["stopped"], true);
    let r = form(&h, &owner, "/emergency/resume", &[("confirm", "yes")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/");
    assert_eq!(stopped(&h, &owner).await["stopped"], false);
    let r = page(&h, &owner, "/").await;
    assert!(!r.text.contains(r#"id="emergency-banner""#));
}
