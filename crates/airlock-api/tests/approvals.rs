//! Approvals and the emergency stop over HTTP (AGT-5, AGT-6, API-2): the
//! real router on a real SQLite store, a recording launcher behind the
//! executor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use airlock_iam::{Permission, Role};
use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

const GATED: &str = "[worker]\nid = \"gated\"\ntitle = \"gated\"\ndescription = \"test\"\n\
                     kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\
                     [approvals]\nrequired = true\nreason = \"sends mail\"\nttl_s = 60\n";

async fn harness() -> Harness {
    Harness::builder()
        .worker("gated", GATED, ECHO)
        .worker("hello", HELLO, ECHO)
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
    assert_eq!(r.body["run"]["state"], "awaiting_approval");
    let run = r.body["run"]["id"].as_str().unwrap().to_string();
    let l = h
        .call(who, "GET", &format!("/v1/approvals?run={run}"), None)
        .await;
    assert_eq!(l.status, StatusCode::OK, "{}", l.body);
    let id = l.body["approvals"][0]["id"].as_str().unwrap().to_string();
    (run, id)
}

async fn run_state(h: &Harness, who: &Cred, run: &str) -> (String, Value) {
    let r = h.call(who, "GET", &format!("/v1/runs/{run}"), None).await;
    (
        r.body["run"]["state"].as_str().unwrap_or("").to_string(),
        r.body["run"]["error_code"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_approvals_over_http_bind_the_payload_and_decide_once() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let alice = h.member(&owner, "alice", "human_assistant").await;
    let bob = h.member(&owner, "bob", "assistant_manager").await;
    let dev = h.member(&owner, "dev", "developer").await;
    let (run, id) = gated_run(&h, &owner).await;

    // The request in full, with the hash of its canonical JSON.
    let a = h
        .call(&alice, "GET", &format!("/v1/approvals/{id}"), None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["state"], "pending");
    assert_eq!(a.body["kind"], "run");
    assert_eq!(a.body["reason"], "sends mail");
    let payload = &a.body["payload"];
    assert_eq!(payload["worker"], "gated");
    for key in ["input_hash", "entry_sha256", "runtime", "limits", "egress"] {
        assert!(!payload[key].is_null(), "{key} in {payload}");
    }
    let hash = a.body["payload_hash"].as_str().unwrap().to_string();
    let canonical = airlock_audit::canonicalize(payload).unwrap();
    assert_eq!(hash, airlock_store::sha256_hex(&canonical));
    // The request is an `approval` event on the run's stream.
    let events = h.store().events("ws_default", &run, 0, 50).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == "approval" && e.data["payload_hash"] == hash.as_str())
    );

    // Who may not decide: the member who started the run, a role without
    // approvals.decide, a key of a decider without that scope.
    let url = format!("/v1/approvals/{id}/approve");
    let r = h.call(&owner, "POST", &url, Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "self_approval");
    let r = h.call(&dev, "POST", &url, Some(json!({}))).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (StatusCode::FORBIDDEN, json!("forbidden"))
    );
    let (narrow, _) = h
        .api_key(&alice, json!({"name": "bot", "scopes": ["runs.read"]}))
        .await;
    let r = h
        .call(&Cred::Key(narrow), "POST", &url, Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // The approver pins what they reviewed: another hash is refused.
    let r = h
        .call(
            &alice,
            "POST",
            &url,
            Some(json!({"payload_hash": "0".repeat(64)})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "approval_hash_mismatch");
    // A run's approval takes no standing grant.
    let r = h
        .call(&alice, "POST", &url, Some(json!({"grant": "payload"})))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    // Positive control: a key of the same person with the scope decides.
    let (full, _) = h
        .api_key(
            &alice,
            json!({"name": "cli", "scopes": ["approvals.decide", "runs.read"]}),
        )
        .await;
    let r = h
        .call(
            &Cred::Key(full),
            "POST",
            &url,
            Some(json!({"payload_hash": hash, "note": "looks right"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["state"], "approved");
    assert_eq!(run_state(&h, &owner, &run).await.0, "queued");
    // Replay: 409.
    let r = h.call(&bob, "POST", &url, Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "approval_not_pending");
    let r = h
        .call(
            &bob,
            "POST",
            &format!("/v1/approvals/{id}/reject"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);

    // Approve and reject racing: exactly one wins, the run follows it.
    for _ in 0..3 {
        let (run, id) = gated_run(&h, &owner).await;
        let (ap, rj) = (
            format!("/v1/approvals/{id}/approve"),
            format!("/v1/approvals/{id}/reject"),
        );
        let approve = h.call(&alice, "POST", &ap, Some(json!({})));
        let reject = h.call(&bob, "POST", &rj, Some(json!({"note": "no"})));
        let (a, b) = tokio::join!(approve, reject);
        let ok: Vec<&Resp> = [&a, &b]
            .into_iter()
            .filter(|r| r.status == StatusCode::OK)
            .collect();
        assert_eq!(ok.len(), 1, "{} / {}", a.body, b.body);
        let loser = if a.status == StatusCode::OK { &b } else { &a };
        assert_eq!(loser.status, StatusCode::CONFLICT, "{}", loser.body);
        let (state, code) = run_state(&h, &owner, &run).await;
        if ok[0].body["state"] == "approved" {
            assert_eq!(state, "queued");
        } else {
            assert_eq!(
                (state.as_str(), code),
                ("blocked", json!("approval_rejected"))
            );
        }
    }
    // Self-approval, once the workspace allows it (policy.manage).
    let r = h
        .call(
            &alice,
            "PUT",
            "/v1/approval-settings",
            Some(json!({"allow_self_approval": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/approval-settings",
            Some(json!({"allow_self_approval": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (_, id) = gated_run(&h, &owner).await;
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/approvals/{id}/approve"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The list filters by state and pages.
    let r = h
        .call(&alice, "GET", "/v1/approvals?state=approved&limit=1", None)
        .await;
    assert_eq!(r.body["approvals"].as_array().unwrap().len(), 1);
    assert!(r.body["next_cursor"].is_string());
    // Every decision is in the audit chain with its payload hash.
    let audit = h.call(&owner, "GET", "/v1/audit?limit=500", None).await;
    let approved = audit.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "approval.approved")
        .expect("audited")
        .clone();
    assert_eq!(approved["payload_hash"], hash.as_str());
    assert_eq!(approved["decision"], "approved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_another_workspaces_approver_gets_the_same_404_as_a_missing_one() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let (_, id) = gated_run(&h, &owner).await;
    // Mallory decides in her own workspace, where she is the owner.
    let mallory = h.member(&owner, "mallory", "viewer").await;
    let evil = h.create_workspace(&mallory, "evil").await;
    h.call(&owner, "DELETE", "/v1/members/mallory", None).await;
    let r = h
        .call_ws(
            &mallory,
            "POST",
            "/v1/keys",
            // approvals.decide only when named (not in a key's default).
            Some(json!({"name": "m", "scopes": ["approvals.decide", "runs.read"]})),
            Some(&evil),
        )
        .await;
    let mkey = Cred::Key(r.body["key"].as_str().unwrap().to_string());
    for (m, path, b) in [
        ("GET", format!("/v1/approvals/{id}"), None),
        (
            "POST",
            format!("/v1/approvals/{id}/approve"),
            Some(json!({})),
        ),
        (
            "POST",
            format!("/v1/approvals/{id}/reject"),
            Some(json!({})),
        ),
    ] {
        let theirs = h.call(&mkey, m, &path, b.clone()).await;
        let missing = h.call(&mkey, m, &path.replace(&id, "apr_missing"), b).await;
        assert_eq!(
            theirs.status,
            StatusCode::NOT_FOUND,
            "{m} {path}: {}",
            theirs.body
        );
        assert_eq!(theirs.body["error"]["code"], missing.body["error"]["code"]);
        assert_eq!(
            theirs.body["error"]["message"],
            missing.body["error"]["message"]
        );
    }
    let r = h.call(&mkey, "GET", "/v1/approvals", None).await;
    assert_eq!(r.body["approvals"], json!([]));
    // Positive control: the request is still pending, and a decider of its
    // own workspace sees it.
    let alice = h.member(&owner, "alice", "human_assistant").await;
    let r = h
        .call(&alice, "GET", &format!("/v1/approvals/{id}"), None)
        .await;
    assert_eq!(r.body["state"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iam_7_approvals_policy_and_emergency_permissions_follow_the_role_table() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let mut checked = 0;
    for role in Role::ALL {
        let who = if *role == Role::Owner {
            owner.clone()
        } else {
            h.member(
                &owner,
                &format!("u-{}", role.as_str().replace('_', "-")),
                role.as_str(),
            )
            .await
        };
        // approvals.decide: 404 for a missing request when allowed.
        let r = h
            .call(
                &who,
                "POST",
                "/v1/approvals/apr_missing/approve",
                Some(json!({})),
            )
            .await;
        let want = if role.permits(Permission::ApprovalsDecide) {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(r.status, want, "{role:?} approvals.decide: {}", r.body);
        // policy.manage.
        let r = h.call(&who, "GET", "/v1/approval-rules", None).await;
        assert_eq!(
            r.status.is_success(),
            role.permits(Permission::PolicyManage),
            "{role:?} policy.manage: {}",
            r.body
        );
        // emergency.stop (the owner resumes after each).
        let r = h
            .call(&who, "POST", "/v1/emergency-stop", Some(json!({})))
            .await;
        assert_eq!(
            r.status.is_success(),
            role.permits(Permission::EmergencyStop),
            "{role:?} emergency.stop: {}",
            r.body
        );
        if !r.status.is_success() {
            assert_eq!(r.status, StatusCode::FORBIDDEN);
        }
        let r = h
            .call(&who, "POST", "/v1/emergency-stop/resume", None)
            .await;
        assert_eq!(
            r.status.is_success(),
            role.permits(Permission::EmergencyResume),
            "{role:?} emergency.resume: {}",
            r.body
        );
        let r = h
            .call(&owner, "POST", "/v1/emergency-stop/resume", None)
            .await;
        assert_eq!(r.status, StatusCode::OK);
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_6_emergency_stop_over_http_cancels_refuses_and_resume_restarts_nothing() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let (waiting, _) = gated_run(&h, &owner).await;
    let r = h
        .call(&owner, "POST", "/v1/workers/hello/runs", Some(json!({})))
        .await;
    let queued = r.body["run"]["id"].as_str().unwrap().to_string();
    let r = h.call(&owner, "GET", "/v1/emergency-stop", None).await;
    assert_eq!(r.body["stopped"], false);
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/emergency-stop",
            Some(json!({"reason": "runaway agent"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["runs_cancelled"], 2);
    assert_eq!(r.body["approvals_cancelled"], 1);
    assert_eq!(r.body["state"]["reason"], "runaway agent");
    for run in [&waiting, &queued] {
        assert_eq!(
            run_state(&h, &owner, run).await,
            ("cancelled".to_string(), json!("emergency_stop"))
        );
    }
    // New runs and plans are refused while stopped.
    let r = h
        .call(&owner, "POST", "/v1/workers/hello/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "emergency_stopped");
    let r = h.call(&owner, "GET", "/v1/emergency-stop", None).await;
    assert_eq!(r.body["stopped"], true);
    // Resume restarts nothing; new runs are accepted again.
    let r = h
        .call(&owner, "POST", "/v1/emergency-stop/resume", None)
        .await;
    assert_eq!(r.body["stopped"], false);
    for run in [&waiting, &queued] {
        assert_eq!(run_state(&h, &owner, run).await.0, "cancelled");
    }
    let r = h
        .call(&owner, "POST", "/v1/workers/hello/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let audit = h
        .call(&owner, "GET", "/v1/audit?limit=500", None)
        .await
        .body
        .to_string();
    assert!(audit.contains("emergency.stopped") && audit.contains("emergency.resumed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dur_2_a_runs_actions_are_listed_and_settled_in_its_workspace_only() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(&owner, "GET", "/v1/runs/run_missing/actions", None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = h
        .call(&owner, "POST", "/v1/workers/hello/runs", Some(json!({})))
        .await;
    let run = r.body["run"]["id"].as_str().unwrap().to_string();
    let r = h
        .call(&owner, "GET", &format!("/v1/runs/{run}/actions"), None)
        .await;
    assert_eq!(
        (r.status, r.body.clone()),
        (StatusCode::OK, json!({"actions": []}))
    );
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/runs/{run}/actions/act_missing/settle"),
            Some(json!({"outcome": "succeeded"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = h
        .call(
            &owner,
            "POST",
            &format!("/v1/runs/{run}/actions/act_missing/settle"),
            Some(json!({"outcome": "maybe"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
}

/// A key holds `approvals.decide` only when it is named, and even then
/// never approves a run its own user started, whatever the workspace's
/// settings: the credential an automation (an MCP host) starts runs with
/// cannot wave their requests through. The session of the same user,
/// with self-approval allowed, can: the positive control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_a_key_decides_only_when_scoped_and_never_its_own_run() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/approval-settings",
            Some(json!({"allow_self_approval": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = h
        .call(&owner, "POST", "/v1/keys", Some(json!({"name": "plain"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let scopes = r.body["api_key"]["scopes"].as_array().unwrap().clone();
    assert!(!scopes.contains(&json!("approvals.decide")), "{scopes:?}");
    assert!(scopes.contains(&json!("runs.create")), "{scopes:?}");
    let plain = Cred::Key(r.body["key"].as_str().unwrap().to_string());
    let (key, _) = h
        .api_key(
            &owner,
            json!({"name": "scoped", "scopes": ["approvals.decide", "runs.read", "runs.create"]}),
        )
        .await;
    let scoped = Cred::Key(key);
    let (_, id) = gated_run(&h, &scoped).await;
    let path = format!("/v1/approvals/{id}/approve");
    let r = h.call(&plain, "POST", &path, Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = h.call(&scoped, "POST", &path, Some(json!({}))).await;
    assert_eq!(r.body["error"]["code"], "self_approval", "{}", r.body);
    let r = h.call(&owner, "POST", &path, Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}
