//! Model profiles over HTTP (AGT-2, API-2, IAM-7): who may write and read
//! them, what a refused profile answers, and that another workspace's
//! profile is invisible (the same 404 as a missing one, and a write of the
//! same name there touches nothing here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn profile() -> Value {
    json!({"profile": {
        "format": "openai-chat",
        "channel": "openai",
        "model": "gpt-4.1-mini",
        "prices": {"input": 0.4, "output": 1.6}
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_2_model_profiles_are_written_by_agent_managers_and_read_by_members() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let dev = h.member(&owner, "dev", "developer").await;
    let viewer = h.member(&owner, "viewer", "viewer").await;
    let assistant = h.member(&owner, "assistant", "human_assistant").await;

    let r = h
        .call(&dev, "PUT", "/v1/model-profiles/triage", Some(profile()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["name"], "triage");
    assert_eq!(r.body["profile"]["channel"], "openai");

    // Reading needs only workers.read; writing needs agents.manage.
    let r = h
        .call(&viewer, "GET", "/v1/model-profiles/triage", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["profile"]["model"], "gpt-4.1-mini");
    let r = h.call(&viewer, "GET", "/v1/model-profiles", None).await;
    assert_eq!(
        r.body["profiles"].as_array().unwrap().len(),
        1,
        "{}",
        r.body
    );
    for who in [&viewer, &assistant] {
        let r = h
            .call(who, "PUT", "/v1/model-profiles/triage", Some(profile()))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "forbidden");
        let r = h
            .call(who, "DELETE", "/v1/model-profiles/triage", None)
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    }
    // Positive control: the same delete by a developer works, and then the
    // profile is gone.
    let r = h
        .call(&dev, "DELETE", "/v1/model-profiles/triage", None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    let r = h
        .call(&viewer, "GET", "/v1/model-profiles/triage", None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_2_a_refused_profile_is_422_and_a_credential_field_is_never_stored() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let key = "sk-proj-thisisnotarealkeybutlookslikeone0123456789";
    let cases = [
        ("empty", json!({})),
        (
            "both channel and base_url",
            json!({"format": "openai-chat", "channel": "openai",
                   "base_url": "https://api.openai.com", "model": "m"}),
        ),
        (
            "neither channel nor base_url",
            json!({"format": "openai-chat", "model": "m"}),
        ),
        (
            "unknown format",
            json!({"format": "gemini", "channel": "openai", "model": "m"}),
        ),
        (
            "a negative price",
            json!({"format": "openai-chat", "channel": "openai", "model": "m",
                   "prices": {"input": -1.0}}),
        ),
        (
            "a key in the profile",
            json!({"format": "openai-chat", "channel": "openai", "model": "m",
                   "api_key": key}),
        ),
    ];
    for (why, p) in cases {
        let r = h
            .call(
                &owner,
                "PUT",
                "/v1/model-profiles/p",
                Some(json!({ "profile": p })),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{why}: {}",
            r.body
        );
        assert_eq!(r.body["error"]["code"], "model_profile_invalid", "{why}");
        assert!(!r.body.to_string().contains(key), "{why}: {}", r.body);
    }
    // Nothing was stored, and the key is nowhere in the audit log.
    let r = h.call(&owner, "GET", "/v1/model-profiles", None).await;
    assert_eq!(r.body["profiles"], json!([]), "{}", r.body);
    let audit = h.store().audit_lines("ws_default").await.unwrap();
    assert!(!audit.is_empty());
    assert!(!audit.concat().contains(key));
    // A name outside the pattern is refused before the body is looked at.
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/model-profiles/Bad%20Name",
            Some(profile()),
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    assert_ne!(r.status, StatusCode::OK);
    // Positive control: the valid profile is accepted at the same path.
    let r = h
        .call(&owner, "PUT", "/v1/model-profiles/p", Some(profile()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_2_another_workspaces_profile_is_the_same_404_as_a_missing_one() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(&owner, "PUT", "/v1/model-profiles/triage", Some(profile()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // Mallory owns a workspace of her own and is no member of this one.
    let mallory = h.member(&owner, "mallory", "viewer").await;
    let evil = h.create_workspace(&mallory, "evil").await;
    h.call(&owner, "DELETE", "/v1/members/mallory", None).await;
    let r = h
        .call_ws(
            &mallory,
            "POST",
            "/v1/keys",
            Some(json!({"name": "m"})),
            Some(&evil),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let mkey = Cred::Key(r.body["key"].as_str().unwrap().to_string());

    for m in ["GET", "DELETE"] {
        let theirs = h.call(&mkey, m, "/v1/model-profiles/triage", None).await;
        let missing = h.call(&mkey, m, "/v1/model-profiles/nothing", None).await;
        assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{m}: {}", theirs.body);
        assert_eq!(
            (
                theirs.status,
                &theirs.body["error"]["code"],
                &theirs.body["error"]["message"]
            ),
            (
                missing.status,
                &missing.body["error"]["code"],
                &missing.body["error"]["message"]
            ),
            "{m}"
        );
    }
    let r = h.call(&mkey, "GET", "/v1/model-profiles", None).await;
    assert_eq!(r.body["profiles"], json!([]), "{}", r.body);
    // Her write of the same name is her own profile; ours is untouched.
    let mut hers = profile();
    hers["profile"]["model"] = json!("exfiltrate");
    let r = h
        .call(&mkey, "PUT", "/v1/model-profiles/triage", Some(hers))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = h
        .call(&owner, "GET", "/v1/model-profiles/triage", None)
        .await;
    assert_eq!(r.body["profile"]["model"], "gpt-4.1-mini", "{}", r.body);
    // Positive control: her key does see her own profile.
    let r = h
        .call(&mkey, "GET", "/v1/model-profiles/triage", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["profile"]["model"], "exfiltrate");
}
