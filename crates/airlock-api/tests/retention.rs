//! Retention over HTTP (DUR-7, IAM-7): the real router on a real SQLite
//! store. Reading, setting, previewing and applying a workspace's
//! retention is `workspace.manage`, for every role as the role table says;
//! each workspace has its own settings; bad bodies get 400.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use airlock_iam::{Permission, Role};
use axum::http::StatusCode;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dur_7_retention_is_workspace_manage_and_per_workspace() {
    let h = Harness::builder().build().await;
    let owner = h.bootstrap_owner().await;
    let mut allowed = 0;
    for role in Role::ALL {
        let who = if *role == Role::Owner {
            owner.clone()
        } else {
            h.member(
                &owner,
                &format!("r-{}", role.as_str().replace('_', "-")),
                role.as_str(),
            )
            .await
        };
        let may = role.permits(Permission::WorkspaceManage);
        allowed += usize::from(may);
        for (method, path, body) in [
            ("GET", "/v1/retention", None),
            ("PUT", "/v1/retention", Some(json!({"runs_days": 90}))),
            ("GET", "/v1/retention/preview", None),
            ("POST", "/v1/retention/apply", None),
        ] {
            let r = h.call(&who, method, path, body).await;
            let want = if may {
                StatusCode::OK
            } else {
                StatusCode::FORBIDDEN
            };
            assert_eq!(r.status, want, "{role:?} {method} {path}: {}", r.body);
        }
    }
    // Control: some roles may and some may not.
    assert!(allowed > 0 && allowed < Role::ALL.len(), "{allowed}");

    let r = h.call(&owner, "GET", "/v1/retention", None).await;
    assert_eq!(r.body["runs_days"], 90, "{}", r.body);
    let r = h.call(&owner, "POST", "/v1/retention/apply", None).await;
    assert_eq!(r.body["dry_run"], false, "{}", r.body);
    assert_eq!(r.body["retention"]["runs_days"], 90, "{}", r.body);

    for bad in [
        json!({"runs_days": 0}),
        json!({"runs_days": 36_501}),
        json!({"runs_days": -3}),
        json!({"runs_days": "30"}),
        json!({"days": 30}),
        json!([]),
    ] {
        let r = h
            .call(&owner, "PUT", "/v1/retention", Some(bad.clone()))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
    }
    // The refused bodies changed nothing.
    let r = h.call(&owner, "GET", "/v1/retention", None).await;
    assert_eq!(r.body["runs_days"], 90, "{}", r.body);

    // Another workspace of the same owner has its own (none).
    let other = h.create_workspace(&owner, "second").await;
    let r = h
        .call_ws(&owner, "GET", "/v1/retention", None, Some(&other))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body["runs_days"].is_null(), "{}", r.body);
}

/// DUR-7, IAM-7: deleting a workspace is the owner's (`workspace.delete`),
/// needs its name typed again, is refused for another workspace's id (as
/// not found) and for the workspace of the local workers folder; once it is
/// deleted, its members and its API keys reach nothing there, and the
/// owner's other workspace is untouched. Controls: the admin could manage
/// the workspace (retention) but not delete it; the key worked before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dur_7_only_an_owner_deletes_a_workspace_and_nothing_of_it_is_reachable_after() {
    let h = Harness::builder().build().await;
    let owner = h.bootstrap_owner().await;
    let first = h.call(&owner, "GET", "/v1/workspaces", None).await;
    let home = first.body["workspaces"][0]["workspace_id"]
        .as_str()
        .or_else(|| first.body["workspaces"][0]["id"].as_str())
        .unwrap()
        .to_string();
    // An account (made in the home workspace), who is then an admin of the
    // doomed one.
    let ada = h.member(&owner, "ada", "viewer").await;
    let ws = h.create_workspace(&owner, "doomed").await;
    let call = |who: &Cred, m: &'static str, p: String, b: Option<serde_json::Value>| {
        let who = who.clone();
        let ws = ws.clone();
        let h = &h;
        async move { h.call_ws(&who, m, &p, b, Some(&ws)).await }
    };
    let r = call(
        &owner,
        "PUT",
        "/v1/members/ada".into(),
        Some(json!({"role": "admin"})),
    )
    .await;
    assert!(r.status.is_success(), "{}", r.body);
    let r = call(
        &owner,
        "POST",
        "/v1/keys".into(),
        Some(json!({"name": "k"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let key = Cred::Key(r.body["key"].as_str().unwrap().to_string());
    assert!(
        call(&key, "GET", "/v1/retention".into(), None)
            .await
            .status
            .is_success()
    );
    assert!(
        call(&ada, "GET", "/v1/retention".into(), None)
            .await
            .status
            .is_success()
    );

    let path = format!("/v1/workspaces/{ws}/delete");
    let r = call(
        &ada,
        "POST",
        path.clone(),
        Some(json!({"confirm": "doomed"})),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "an admin deleted: {}",
        r.body
    );
    let r = call(
        &owner,
        "POST",
        path.clone(),
        Some(json!({"confirm": "Doomed"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let r = call(
        &owner,
        "POST",
        format!("/v1/workspaces/{home}/delete"),
        Some(json!({"confirm": "doomed"})),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another workspace's id: {}",
        r.body
    );
    let r = h
        .call_ws(
            &owner,
            "POST",
            &format!("/v1/workspaces/{home}/delete"),
            Some(json!({"confirm": "default"})),
            Some(&home),
        )
        .await;
    assert!(
        r.status == StatusCode::BAD_REQUEST || r.status == StatusCode::FORBIDDEN,
        "the workers folder's workspace: {} {}",
        r.status,
        r.body
    );

    let r = call(
        &owner,
        "POST",
        path.clone(),
        Some(json!({"confirm": "doomed"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["id"], ws.as_str());
    assert!(
        r.body["removed"]["memberships"].as_u64().unwrap() >= 2,
        "{}",
        r.body
    );
    assert!(
        r.body["removed"]["api_keys"].as_u64().unwrap() >= 1,
        "{}",
        r.body
    );

    for who in [&owner, &ada, &key] {
        let r = call(who, "GET", "/v1/retention".into(), None).await;
        assert!(!r.status.is_success(), "{} {}", r.status, r.body);
    }
    let r = call(&owner, "POST", path, Some(json!({"confirm": "doomed"}))).await;
    assert!(!r.status.is_success(), "deleted twice: {}", r.body);
    // The owner's first workspace is untouched.
    let r = h
        .call_ws(&owner, "GET", "/v1/retention", None, Some(&home))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = h.call(&owner, "GET", "/v1/workspaces", None).await;
    assert!(!r.body.to_string().contains(&ws), "{}", r.body);
}
