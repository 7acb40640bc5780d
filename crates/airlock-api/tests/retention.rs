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
