//! DUR-2 over the real router: a person settles a run whose outcome is
//! `unknown` — `POST /v1/runs/{id}/retry` queues it again for a new
//! attempt, `POST /v1/runs/{id}/resolve` closes it as `succeeded` or
//! `failed` with a reason. Only `unknown` runs; only roles that may cancel
//! (a viewer is refused, an owner is not); another workspace's run is the
//! same `not_found` as a missing one; each settlement is in the audit
//! chain with its actor and reason. The `unknown` run is made the way the
//! reaper makes one: claimed, its workload started, its lease lapsed.
//! The happy paths run on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use airlock_store::RunState;
use axum::http::StatusCode;
use common::{Cred, Db, Harness, on_both_backends};
use serde_json::{Value, json};

/// A run of `hello` in the caller's workspace, left `unknown` by the
/// reaper (its holder died after the workload started).
async fn unknown_run(h: &Harness, who: &Cred, ws: Option<&str>) -> String {
    let r = h
        .call_ws(
            who,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
            ws,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["run"]["id"].as_str().unwrap().to_string();
    let claim = h
        .store
        .claim_run("node-dead:1", Duration::from_secs(30), &id)
        .await
        .unwrap()
        .unwrap();
    h.store
        .mark_workload_started(&id, claim.token)
        .await
        .unwrap();
    h.store.expire_lease(&id, "node-dead:1").await.unwrap();
    let reaped = h.store.reap_expired(&|_| false).await.unwrap();
    assert!(
        reaped.contains(&(id.clone(), RunState::Unknown)),
        "{reaped:?}"
    );
    id
}

async fn state(h: &Harness, who: &Cred, id: &str) -> Value {
    h.call(who, "GET", &format!("/v1/runs/{id}"), None)
        .await
        .body["run"]["state"]
        .clone()
}

/// The audit events of `kind` for `run`, as the owner reads them.
async fn audit_of(h: &Harness, owner: &Cred, kind: &str, run: &str) -> Vec<Value> {
    let r = h.call(owner, "GET", "/v1/audit?limit=500", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == kind && e["run_id"] == run)
        .cloned()
        .collect()
}

async fn user_id(h: &Harness, who: &Cred) -> String {
    let r = h.call(who, "GET", "/v1/session", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["user"]["id"].as_str().unwrap().to_string()
}

on_both_backends!(dur_2_retry_queues_an_unknown_run_again_audited_with_actor_and_reason);
async fn dur_2_retry_queues_an_unknown_run_again_audited_with_actor_and_reason(db: Db) {
    let h = Harness::builder().db(db).build().await;
    let owner = h.bootstrap_owner().await;
    let id = unknown_run(&h, &owner, None).await;
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/runs/{id}/retry"),
            Some(json!({"reason": "the target shows nothing was written"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["state"], "queued");
    assert_eq!(r.body["id"], id.as_str());
    assert_eq!(r.body["error_code"], Value::Null);
    assert_eq!(r.body["attempt"], 1, "the next claim makes attempt 2");
    let ev = audit_of(&h, &owner, "run.retried", &id).await;
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0]["metadata"]["reason"],
        "the target shows nothing was written"
    );
    assert_eq!(ev[0]["actor"]["kind"], "human");
    assert_eq!(ev[0]["actor"]["id"], user_id(&h, &owner).await.as_str());
    // The new attempt is claimed like any queued run.
    let claim = h
        .store
        .claim_run("node-live:2", Duration::from_secs(30), &id)
        .await
        .unwrap()
        .expect("queued again");
    assert_eq!(claim.run.attempt, 2);
    // Not unknown any more: a second retry is refused and changes nothing.
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/runs/{id}/retry"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "run_not_unknown");
    assert_eq!(state(&h, &owner, &id).await, "running");
    assert_eq!(audit_of(&h, &owner, "run.retried", &id).await.len(), 1);
}

on_both_backends!(dur_2_resolve_closes_an_unknown_run_as_failed_or_succeeded_with_a_reason);
async fn dur_2_resolve_closes_an_unknown_run_as_failed_or_succeeded_with_a_reason(db: Db) {
    let h = Harness::builder().db(db).build().await;
    let owner = h.bootstrap_owner().await;
    for (outcome, code) in [("failed", json!("abandoned")), ("succeeded", Value::Null)] {
        let id = unknown_run(&h, &owner, None).await;
        let r = h
            .call(
                &owner,
                "POST",
                &format!("/v1/runs/{id}/resolve"),
                Some(json!({"outcome": outcome, "reason": "checked by hand"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["state"], outcome);
        assert_eq!(r.body["error_code"], code, "{}", r.body);
        assert!(
            r.body["error_message"]
                .as_str()
                .unwrap()
                .contains("checked by hand"),
            "{}",
            r.body
        );
        let ev = audit_of(&h, &owner, "run.resolved", &id).await;
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0]["result"], outcome);
        assert_eq!(ev[0]["metadata"]["reason"], "checked by hand");
        assert_eq!(ev[0]["actor"]["id"], user_id(&h, &owner).await.as_str());
        // Settled once: resolving or retrying again is refused.
        for (path, body) in [
            (
                "resolve",
                json!({"outcome": "succeeded", "reason": "again"}),
            ),
            ("retry", json!({})),
        ] {
            let r = h
                .call(&owner, "POST", &format!("/v1/runs/{id}/{path}"), Some(body))
                .await;
            assert_eq!(r.status, StatusCode::CONFLICT, "{path}: {}", r.body);
            assert_eq!(r.body["error"]["code"], "run_not_unknown");
        }
        assert_eq!(state(&h, &owner, &id).await, outcome);
    }
    // A reason is required, and bounded.
    let id = unknown_run(&h, &owner, None).await;
    for body in [
        json!({"outcome": "failed"}),
        json!({"outcome": "failed", "reason": "  "}),
        json!({"outcome": "failed", "reason": "x".repeat(1001)}),
        json!({"outcome": "failed", "reason": "bell\u{7}"}),
        json!({"outcome": "maybe", "reason": "x"}),
    ] {
        let r = h
            .call(
                &owner,
                "POST",
                &format!("/v1/runs/{id}/resolve"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.body);
    }
    assert_eq!(state(&h, &owner, &id).await, "unknown");
}

/// Refusals: a run that is not `unknown` (a queued one), a viewer (no
/// `runs.cancel`), another workspace's run (the same `not_found` as a
/// missing one). Positive control: the owner settles the same run.
#[tokio::test]
async fn dur_2_settling_is_refused_to_viewers_other_workspaces_and_other_states() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let id = unknown_run(&h, &owner, None).await;
    // A queued run is not unknown.
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
        )
        .await;
    let queued = r.body["run"]["id"].as_str().unwrap().to_string();
    for (path, body) in [
        ("retry", json!({})),
        ("resolve", json!({"outcome": "failed", "reason": "x"})),
    ] {
        let r = h
            .call(
                &owner,
                "POST",
                &format!("/v1/runs/{queued}/{path}"),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "run_not_unknown");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("queued"),
            "{}",
            r.body
        );
    }
    assert_eq!(state(&h, &owner, &queued).await, "queued");

    // A viewer of the same workspace.
    let viewer = h.member(&owner, "vera", "viewer").await;
    for (path, body) in [
        ("retry", json!({"reason": "v"})),
        ("resolve", json!({"outcome": "succeeded", "reason": "v"})),
    ] {
        let r = h
            .call(
                &viewer,
                "POST",
                &format!("/v1/runs/{id}/{path}"),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}: {}", r.body);
    }
    assert_eq!(state(&h, &owner, &id).await, "unknown");

    // The owner of another workspace, with an unknown run of her own there.
    let mallory = h.member(&owner, "mallory", "viewer").await;
    let evil = h.create_workspace(&mallory, "evil").await;
    h.call(&owner, "DELETE", "/v1/members/mallory", None).await;
    for (path, body) in [
        ("retry", json!({"reason": "m"})),
        ("resolve", json!({"outcome": "succeeded", "reason": "m"})),
    ] {
        let theirs = h
            .call_ws(
                &mallory,
                "POST",
                &format!("/v1/runs/{id}/{path}"),
                Some(body.clone()),
                Some(&evil),
            )
            .await;
        let missing = h
            .call_ws(
                &mallory,
                "POST",
                &format!("/v1/runs/run_missing/{path}"),
                Some(body),
                Some(&evil),
            )
            .await;
        assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.body);
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(theirs.body["error"]["code"], missing.body["error"]["code"]);
        assert_eq!(
            theirs.body["error"]["message"],
            missing.body["error"]["message"]
        );
    }
    assert_eq!(state(&h, &owner, &id).await, "unknown");
    assert!(audit_of(&h, &owner, "run.retried", &id).await.is_empty());
    assert!(audit_of(&h, &owner, "run.resolved", &id).await.is_empty());

    // Positive control: the owner may.
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/runs/{id}/resolve"),
            Some(json!({"outcome": "failed", "reason": "owner checked"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(state(&h, &owner, &id).await, "failed");
}
