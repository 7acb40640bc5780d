//! Identity and access over the real router (IAM-1 … IAM-7): every route
//! refuses the unauthenticated, another workspace's ids are the same 404 as
//! missing ones, each role meets each permission as the table says, and the
//! session, MFA, key and bootstrap rules hold under a controllable clock.
//! The router runs in-process on a real SQLite store; no socket is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use airlock_iam::{Clock, Permission, Role, keys, password, totp};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::AuthConfig;
use common::{Cred, Harness, PW, Resp, T0, quiet, session_of};
use serde_json::{Value, json};
use tower::ServiceExt;

impl Harness {
    async fn create_run(&self, who: &Cred) -> Resp {
        self.call(
            who,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
        )
        .await
    }
}

/// Every route of the router except the public ones, with a body that
/// would be accepted.
fn protected_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/session", None),
        ("DELETE", "/v1/session", None),
        ("POST", "/v1/session/mfa", Some(json!({"code": "123456"}))),
        ("GET", "/v1/sessions", None),
        ("POST", "/v1/sessions/revoke-all", None),
        ("DELETE", "/v1/sessions/ses_x", None),
        ("POST", "/v1/mfa/totp", Some(json!({"password": "x"}))),
        (
            "POST",
            "/v1/mfa/totp/confirm",
            Some(json!({"code": "123456"})),
        ),
        ("GET", "/v1/keys", None),
        ("POST", "/v1/keys", Some(json!({"name": "k"}))),
        ("DELETE", "/v1/keys/key_x", None),
        ("GET", "/v1/workspaces", None),
        ("POST", "/v1/workspaces", Some(json!({"name": "w"}))),
        ("GET", "/v1/members", None),
        ("PUT", "/v1/members/bob", Some(json!({"role": "viewer"}))),
        ("DELETE", "/v1/members/bob", None),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/workers", None),
        ("GET", "/v1/workers/hello", None),
        (
            "POST",
            "/v1/workers/validate",
            Some(json!({"manifest": ""})),
        ),
        ("GET", "/v1/runs/run_x/logs", None),
        ("GET", "/v1/roles", None),
        ("GET", "/v1/audit/verify", None),
        ("GET", "/v1/audit/export", None),
        ("GET", "/v1/uploads/upl_x", None),
        ("GET", "/v1/uploads/upl_x/content", None),
        ("POST", "/v1/uploads?name=a.txt", Some(json!({}))),
        ("POST", "/v1/workers/hello/webhook/secret", None),
        ("GET", "/metrics", None),
        ("POST", "/v1/workers/reload", None),
        ("POST", "/v1/workers/hello/runs", Some(json!({"input": {}}))),
        ("GET", "/v1/runs", None),
        ("GET", "/v1/runs/run_x", None),
        ("POST", "/v1/runs/run_x/cancel", None),
        ("POST", "/v1/runs/run_x/retry", Some(json!({}))),
        (
            "POST",
            "/v1/runs/run_x/resolve",
            Some(json!({"outcome": "failed", "reason": "x"})),
        ),
        ("GET", "/v1/runs/run_x/events", None),
        ("GET", "/v1/runs/run_x/artifacts/out.txt", None),
        ("POST", "/v1/plans", Some(json!({"worker": "hello"}))),
        ("POST", "/v1/plans/run", Some(json!({"token": "x"}))),
        ("GET", "/v1/approvals", None),
        ("GET", "/v1/approvals/apr_x", None),
        ("POST", "/v1/approvals/apr_x/approve", Some(json!({}))),
        ("POST", "/v1/approvals/apr_x/reject", Some(json!({}))),
        ("GET", "/v1/approval-rules", None),
        ("POST", "/v1/approval-rules/rul_x/revoke", None),
        ("GET", "/v1/approval-settings", None),
        (
            "PUT",
            "/v1/approval-settings",
            Some(json!({"allow_self_approval": true})),
        ),
        ("GET", "/v1/emergency-stop", None),
        ("POST", "/v1/emergency-stop", Some(json!({}))),
        ("POST", "/v1/emergency-stop/resume", None),
        ("GET", "/v1/runs/run_x/actions", None),
        (
            "POST",
            "/v1/runs/run_x/actions/act_x/settle",
            Some(json!({"outcome": "failed"})),
        ),
        ("GET", "/v1/secrets", None),
        ("PUT", "/v1/secrets/API_TOKEN", Some(json!({"value": "v"}))),
        ("DELETE", "/v1/secrets/API_TOKEN", None),
    ]
}

#[tokio::test]
async fn iam_6_every_route_refuses_the_unauthenticated_and_garbage_credentials() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let garbage = [
        Cred::None,
        Cred::Key("alk_notakey".into()),
        Cred::Key(keys::new_api_key()), // well-formed, unknown
        Cred::CookieOnly("airlock_session=AAAA".into()),
        Cred::CookieOnly("airlock_session=%00%ff; =;;;x; airlock_session".into()),
        Cred::CookieOnly(format!("airlock_session={}", "A".repeat(4000))),
        Cred::Session {
            cookie: "airlock_session=forged".into(),
            csrf: "forged".into(),
        },
    ];
    for (m, p, b) in protected_routes() {
        for g in &garbage {
            let r = h.call(g, m, p, b.clone()).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{m} {p} with {g:?}: {}",
                r.body
            );
            assert_eq!(r.body["error"]["code"], "unauthenticated", "{m} {p}");
            assert!(r.body["error"]["request_id"].is_string());
        }
    }
    // Malformed Authorization headers.
    for auth in ["Basic b3duZXI6cHc=", "Bearer", "Bearer alk_", "alk_x"] {
        let req = Request::builder()
            .uri("/v1/runs")
            .header("authorization", auth)
            .body(Body::empty())
            .unwrap();
        assert_eq!(h.send(req).await.status, StatusCode::UNAUTHORIZED, "{auth}");
    }
    // Positive control: the same routes do answer an authenticated caller.
    let r = h.call(&owner, "GET", "/v1/runs", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The public routes stay public.
    assert_eq!(
        h.call(&Cred::None, "GET", "/healthz", None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn iam_6_another_workspaces_objects_are_the_same_404_as_missing_ones() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let r = h.create_run(&owner).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let run_id = r.body["run"]["id"].as_str().unwrap().to_string();
    h.call(
        &owner,
        "PUT",
        "/v1/secrets/API_TOKEN",
        Some(json!({"value": "s3cret"})),
    )
    .await;
    let owner_key_rec = h
        .call(&owner, "POST", "/v1/keys", Some(json!({"name": "a"})))
        .await;
    let key_id = owner_key_rec.body["api_key"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Mallory owns her own workspace (and is a member of nothing else).
    let mallory = h.member(&owner, "mallory", "viewer").await;
    let evil = h.create_workspace(&mallory, "evil").await;
    h.call(&owner, "DELETE", "/v1/members/mallory", None).await;
    let mkey = {
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
        Cred::Key(r.body["key"].as_str().unwrap().to_string())
    };
    let probes = [
        (
            "GET",
            format!("/v1/runs/{run_id}"),
            "/v1/runs/run_missing".to_string(),
        ),
        (
            "POST",
            format!("/v1/runs/{run_id}/cancel"),
            "/v1/runs/run_missing/cancel".into(),
        ),
        (
            "GET",
            format!("/v1/runs/{run_id}/events"),
            "/v1/runs/run_missing/events".into(),
        ),
        (
            "GET",
            format!("/v1/runs/{run_id}/artifacts/x"),
            "/v1/runs/run_missing/artifacts/x".into(),
        ),
        (
            "DELETE",
            "/v1/secrets/API_TOKEN".into(),
            "/v1/secrets/NOPE".into(),
        ),
        (
            "DELETE",
            format!("/v1/keys/{key_id}"),
            "/v1/keys/key_missing".into(),
        ),
        (
            "DELETE",
            "/v1/members/owner".into(),
            "/v1/members/nobody".into(),
        ),
    ];
    for (m, theirs, missing) in &probes {
        let a = h.call(&mkey, m, theirs, None).await;
        let b = h.call(&mkey, m, missing, None).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{m} {theirs}: {}", a.body);
        assert_eq!(b.status, StatusCode::NOT_FOUND, "{m} {missing}");
        assert_eq!(a.body["error"]["code"], b.body["error"]["code"]);
        assert_eq!(a.body["error"]["message"], b.body["error"]["message"]);
    }
    // Listings show nothing of the other workspace.
    let r = h.call(&mkey, "GET", "/v1/runs", None).await;
    assert_eq!(r.body["runs"], json!([]));
    let r = h.call(&mkey, "GET", "/v1/workers", None).await;
    assert_eq!(r.body["workers"], json!([]));
    let r = h
        .call(&mkey, "POST", "/v1/workers/hello/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = h.call(&mkey, "GET", "/v1/audit", None).await;
    assert!(
        !r.body.to_string().contains(&run_id),
        "another workspace's audit leaked"
    );
    // A session naming a workspace it is not a member of: 404, not 403.
    let r = h
        .call_ws(&mallory, "GET", "/v1/runs", None, Some("ws_default"))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Positive control: the owner sees the run.
    let r = h
        .call(&owner, "GET", &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // The secret was not touched.
    let r = h.call(&owner, "GET", "/v1/secrets", None).await;
    assert!(r.body.to_string().contains("API_TOKEN"));
}

/// One request per permission that has a route; 403 exactly when the
/// role lacks it (the table is `airlock_iam::roles::TABLE`).
#[tokio::test]
async fn iam_7_each_role_against_each_permission() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let run = h.create_run(&owner).await.body["run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let probes: Vec<(Permission, &str, String, Option<Value>)> = vec![
        (Permission::WorkersRead, "GET", "/v1/workers".into(), None),
        (
            Permission::WorkersWrite,
            "POST",
            "/v1/workers/reload".into(),
            None,
        ),
        (
            Permission::RunsCreate,
            "POST",
            "/v1/plans".into(),
            Some(json!({"worker": "hello"})),
        ),
        (
            Permission::RunsCancel,
            "POST",
            format!("/v1/runs/{run}/cancel"),
            None,
        ),
        (Permission::RunsRead, "GET", "/v1/runs".into(), None),
        (
            Permission::SecretsWrite,
            "PUT",
            "/v1/secrets/ROLE_PROBE".into(),
            Some(json!({"value": "x"})),
        ),
        (Permission::SecretsList, "GET", "/v1/secrets".into(), None),
        (Permission::AuditRead, "GET", "/v1/audit".into(), None),
        (
            Permission::AuditExport,
            "GET",
            "/v1/audit/export".into(),
            None,
        ),
        (
            Permission::MembersManage,
            "PUT",
            "/v1/members/probe-target".into(),
            Some(json!({"role": "viewer"})),
        ),
        (Permission::KeysOwn, "GET", "/v1/keys".into(), None),
    ];
    let mut checked = 0;
    for role in Role::ALL {
        let user = format!("u-{}", role.as_str().replace('_', "-"));
        let who = if *role == Role::Owner {
            owner.clone()
        } else {
            h.member(&owner, &user, role.as_str()).await
        };
        for (perm, m, p, b) in &probes {
            let r = h.call(&who, m, p, b.clone()).await;
            if role.permits(*perm) {
                assert_ne!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{role:?} should hold {perm:?}: {}",
                    r.body
                );
                assert!(
                    r.status.is_success(),
                    "{role:?} {perm:?}: {} {}",
                    r.status,
                    r.body
                );
            } else {
                assert_eq!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{role:?} must not hold {perm:?}: {}",
                    r.body
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, Role::ALL.len() * 11);
}

#[tokio::test]
async fn iam_7_nobody_grants_what_they_lack_and_a_workspace_keeps_an_owner() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let admin = h.member(&owner, "ada", "admin").await;
    // An administrator cannot make an owner, nor touch one.
    let r = h
        .call(
            &admin,
            "PUT",
            "/v1/members/eve",
            Some(json!({"role": "owner"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = h
        .call(
            &admin,
            "PUT",
            "/v1/members/owner",
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = h.call(&admin, "DELETE", "/v1/members/owner", None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // But can manage a developer.
    let r = h
        .call(
            &admin,
            "PUT",
            "/v1/members/dev",
            Some(json!({"role": "developer"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // The last owner stays.
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/members/owner",
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let r = h.call(&owner, "DELETE", "/v1/members/owner", None).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    // A key cannot be given scopes its creator lacks.
    let r = h
        .call(
            &admin,
            "POST",
            "/v1/keys",
            Some(json!({"name": "x", "scopes": ["workspace.delete"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = h
        .call(
            &admin,
            "POST",
            "/v1/keys",
            Some(json!({"name": "x", "scopes": ["no.such"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let verified = h.call(&owner, "GET", "/v1/audit/verify", None).await;
    assert_eq!(verified.body["ok"], true, "{}", verified.body);
    let audit = h.call(&owner, "GET", "/v1/audit?limit=500", None).await;
    let types: Vec<&str> = audit.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert!(types.contains(&"member.added"), "{types:?}");
}

#[tokio::test]
async fn iam_5_a_key_never_exceeds_its_creators_current_permissions() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let dev = h.member(&owner, "dev", "developer").await;
    let key = Cred::Key(h.api_key(&dev, json!({"name": "ci"})).await.0);
    assert_eq!(h.create_run(&key).await.status, StatusCode::CREATED);
    // Narrow scopes narrow the key.
    let ro = Cred::Key(
        h.api_key(&dev, json!({"name": "ro", "scopes": ["runs.read"]}))
            .await
            .0,
    );
    assert_eq!(h.create_run(&ro).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        h.call(&ro, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    // Demoting the creator narrows the key at once.
    h.call(
        &owner,
        "PUT",
        "/v1/members/dev",
        Some(json!({"role": "viewer"})),
    )
    .await;
    assert_eq!(h.create_run(&key).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        h.call(&key, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    // Removing the creator kills it.
    h.call(&owner, "DELETE", "/v1/members/dev", None).await;
    assert_eq!(
        h.call(&key, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Keys cannot mint keys.
    let okey = Cred::Key(h.api_key(&owner, json!({"name": "o"})).await.0);
    let r = h
        .call(&okey, "POST", "/v1/keys", Some(json!({"name": "child"})))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn iam_5_revoked_and_expired_keys_are_refused_and_last_use_is_recorded() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let (k, _) = h
        .api_key(&owner, json!({"name": "short", "expires_in_s": 60}))
        .await;
    assert!(k.starts_with("alk_") && keys::api_key_checksum_ok(&k));
    let key = Cred::Key(k.clone());
    assert_eq!(
        h.call(&key, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    let list = h.call(&owner, "GET", "/v1/keys", None).await;
    let rec = &list.body["api_keys"][0];
    assert_eq!(rec["last_used_at"], json!(T0));
    assert!(!list.body.to_string().contains(&k), "a key is shown once");
    // Expired.
    h.clock.advance(Duration::from_secs(61));
    assert_eq!(
        h.call(&key, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Revoked.
    let owner = h.login("owner", PW).await;
    let k2 = h.api_key(&owner, json!({"name": "long"})).await.0;
    let id = h.call(&owner, "GET", "/v1/keys", None).await.body["api_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "long")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let key2 = Cred::Key(k2);
    assert_eq!(
        h.call(&key2, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    let r = h
        .call(&owner, "DELETE", &format!("/v1/keys/{id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        h.call(&key2, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Both refusals are audited with their reason.
    let lines = h
        .store()
        .audit_lines("ws_default")
        .await
        .unwrap()
        .join("\n");
    assert!(
        lines.contains("api_key.refused") && lines.contains("expired") && lines.contains("revoked")
    );
}

#[tokio::test]
async fn iam_1_bootstrap_happens_once_even_under_a_race() {
    let h = Harness::new().await;
    let token = keys::new_prefixed_token("alb");
    h.store()
        .bootstrap_begin(&keys::token_hash(&token), T0)
        .await
        .unwrap();
    // Wrong capability first.
    let r = h
        .call(
            &Cred::None,
            "POST",
            "/v1/bootstrap",
            Some(json!({"token": "alb_wrong", "username": "x", "password": PW})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let app = h.app.clone();
        let body = json!({"token": token, "username": format!("racer{i}"), "password": PW});
        tasks.push(tokio::spawn(async move {
            let req = Request::builder()
                .method("POST")
                .uri("/v1/bootstrap")
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            app.oneshot(req).await.unwrap().status()
        }));
    }
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::CREATED => created += 1,
            s => assert_eq!(s, StatusCode::FORBIDDEN),
        }
    }
    assert_eq!(created, 1, "exactly one owner");
    assert_eq!(
        h.store().count_role("ws_default", "owner").await.unwrap(),
        1
    );
    // Reused capability, and a fresh begin: closed for good.
    let r = h
        .call(
            &Cred::None,
            "POST",
            "/v1/bootstrap",
            Some(json!({"token": token, "username": "late", "password": PW})),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        h.store().bootstrap_begin("other", T0).await.unwrap(),
        airlock_store::BootstrapState::Closed
    );
}

#[tokio::test]
async fn iam_2_stored_hashes_are_argon2id_with_the_required_parameters() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    h.member(&owner, "bob", "viewer").await;
    for name in ["owner", "bob"] {
        let u = h.store().user_by_name(name).await.unwrap().unwrap();
        let phc = u.password_hash.unwrap();
        assert!(phc.starts_with("$argon2id$"), "{phc}");
        let (m, t, p) = password::params_of(&phc).unwrap();
        assert!(m >= 19 * 1024 && t >= 2 && p >= 1, "{m} {t} {p}");
    }
}

/// IAM-2: the same answer and the same work for unknown and known
/// accounts. Medians of 200 interleaved failed logins each must be within
/// 5%. (Runs alone: see .config/nextest.toml.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iam_2_login_timing_unknown_vs_known_accounts() {
    let h = Harness::new().await;
    h.bootstrap_owner().await;
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    // Warm-up (the dummy hash is built on first use).
    h.login_resp("ghost", "wrong password!").await;
    for i in 0..200 {
        // Alternate which goes first so order effects cancel out.
        let ghost = format!("ghost{i}");
        let (first, second) = if i % 2 == 0 {
            ("owner", ghost.as_str())
        } else {
            (ghost.as_str(), "owner")
        };
        let t = Instant::now();
        let x = h.login_resp(first, "wrong password!").await;
        let dx = t.elapsed();
        let t = Instant::now();
        let y = h.login_resp(second, "wrong password!").await;
        let dy = t.elapsed();
        let (a, b, da, db) = if i % 2 == 0 {
            (x, y, dx, dy)
        } else {
            (y, x, dy, dx)
        };
        known.push(da);
        unknown.push(db);
        assert_eq!(a.status, b.status);
        assert_eq!(a.body["error"]["code"], b.body["error"]["code"]);
        assert_eq!(a.body["error"]["message"], b.body["error"]["message"]);
    }
    // Paired differences (each pair ran back to back) cancel slow drifts in
    // machine load; their median, relative to the median login, measures
    // the difference in work.
    let mut diffs: Vec<f64> = known
        .iter()
        .zip(&unknown)
        .map(|(k, u)| k.as_secs_f64() - u.as_secs_f64())
        .collect();
    diffs.sort_by(f64::total_cmp);
    known.sort();
    unknown.sort();
    let (k, u) = (known[100].as_secs_f64(), unknown[100].as_secs_f64());
    let diff = diffs[100].abs() / k.max(u);
    eprintln!(
        "median known {:.2} ms, unknown {:.2} ms, median paired difference {:.1}%",
        k * 1e3,
        u * 1e3,
        diff * 100.0
    );
    assert!(
        diff < 0.05,
        "known {k} s vs unknown {u} s: paired difference {:.1}%",
        diff * 100.0
    );
}

#[tokio::test]
async fn iam_2_bad_login_input_and_floods_get_clear_answers() {
    let h = Harness::builder().auth(AuthConfig::default()).build().await;
    h.bootstrap_owner().await;
    // Overlong password and username: 400, not a crash, not a hash of 1 MB.
    let r = h.login_resp("owner", &"p".repeat(100_000)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h.login_resp(&"u".repeat(10_000), "x").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Non-UTF-8 and non-JSON bodies.
    for body in [
        vec![0xff, 0xfe, 0x00, 0x80],
        b"{\"username\":".to_vec(),
        b"[]".to_vec(),
    ] {
        let req = Request::builder()
            .method("POST")
            .uri("/v1/session")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let r = h.send(req).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_body");
    }
    // A flood against a known and an unknown account: the same sequence of
    // answers (401s, then 429 with Retry-After), so nothing is enumerated.
    let seq = |v: &mut Vec<(u16, Option<String>)>, r: &Resp| {
        v.push((
            r.status.as_u16(),
            r.headers
                .get("retry-after")
                .map(|x| x.to_str().unwrap().to_string()),
        ))
    };
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..8 {
        let r = h.login_resp("owner", "wrong password!").await;
        seq(&mut a, &r);
        let r = h.login_resp("nobody-here", "wrong password!").await;
        seq(&mut b, &r);
    }
    assert_eq!(a, b, "known and unknown accounts are throttled alike");
    assert_eq!(a[0].0, 401);
    assert_eq!(a.last().unwrap().0, 429);
    assert!(a.last().unwrap().1.is_some(), "429 carries Retry-After");
    // Even the right password waits out the delay, then works: throttling
    // slows, it never locks out for good.
    let r = h.login_resp("owner", PW).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    h.clock.advance(Duration::from_secs(16 * 60));
    let r = h.login_resp("owner", PW).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // Every failure and throttle is audited.
    let lines = h.store().audit_lines("ws_system").await.unwrap().join("\n");
    assert!(lines.matches("login.failed").count() >= 10);
    assert!(
        lines.matches("login.bad_request").count() >= 5,
        "bad input is audited"
    );
    assert!(lines.contains("login.throttled"));
}

#[tokio::test]
async fn iam_3_csrf_is_required_on_cookie_state_changes() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let Cred::Session { cookie, csrf } = owner.clone() else {
        unreachable!()
    };
    // GET with the cookie alone is fine.
    let r = h
        .call(&Cred::CookieOnly(cookie.clone()), "GET", "/v1/runs", None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // State changes: missing or wrong token → 403.
    for c in [
        Cred::CookieOnly(cookie.clone()),
        Cred::Session {
            cookie: cookie.clone(),
            csrf: "wrong".into(),
        },
        Cred::Session {
            cookie: cookie.clone(),
            csrf: format!("{csrf}x"),
        },
    ] {
        let r = h.create_run(&c).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "csrf_failed");
    }
    // Positive control.
    assert_eq!(h.create_run(&owner).await.status, StatusCode::CREATED);
    // The cookie's attributes (IAM-3).
    let r = h.login_resp("owner", PW).await;
    let sc = r.headers["set-cookie"].to_str().unwrap();
    assert!(
        sc.contains("HttpOnly") && sc.contains("SameSite=Strict") && sc.contains("Path=/"),
        "{sc}"
    );
    let h2 = Harness::builder()
        .auth(AuthConfig {
            secure_cookies: true,
            ..quiet()
        })
        .build()
        .await;
    h2.bootstrap_owner().await;
    let r = h2.login_resp("owner", PW).await;
    let sc = r.headers["set-cookie"].to_str().unwrap();
    assert!(
        sc.starts_with("__Host-airlock_session=") && sc.contains("Secure"),
        "{sc}"
    );
    assert!(r.headers.contains_key("strict-transport-security"));
}

#[tokio::test]
async fn iam_3_login_rotates_tokens_so_a_pre_login_token_is_dead() {
    let h = Harness::new().await;
    h.bootstrap_owner().await;
    let first = h.login("owner", PW).await;
    let old = first.cookie();
    // Logging in again while presenting the old cookie: a new token, and
    // the old one no longer works.
    let r = h.login_resp_with_cookie("owner", PW, &old).await;
    let second = session_of(&r);
    assert_ne!(second.cookie(), old);
    assert_eq!(
        h.call(&first, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        h.call(&second, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    // A token is 256 bits; only its hash is stored.
    let tok = second.cookie().split_once('=').unwrap().1.to_string();
    assert!(tok.len() >= 43);
    let s = h
        .store()
        .session_by_token_hash(&keys::token_hash(&tok))
        .await
        .unwrap();
    assert!(s.is_some());
}

#[tokio::test]
async fn iam_3_idle_and_absolute_expiry_follow_the_clock() {
    let h = Harness::builder()
        .auth(AuthConfig {
            idle_timeout: Duration::from_secs(600),
            absolute_timeout: Duration::from_secs(3600),
            ..quiet()
        })
        .build()
        .await;
    h.bootstrap_owner().await;
    // Idle: used every 9 minutes it lives; 10 minutes unused ends it.
    let s = h.login("owner", PW).await;
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(540));
        assert_eq!(
            h.call(&s, "GET", "/v1/runs", None).await.status,
            StatusCode::OK
        );
    }
    h.clock.advance(Duration::from_secs(600));
    assert_eq!(
        h.call(&s, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Absolute: even when busy, an hour after login it ends.
    let s = h.login("owner", PW).await;
    for _ in 0..6 {
        h.clock.advance(Duration::from_secs(540));
        let st = h.call(&s, "GET", "/v1/runs", None).await.status;
        assert_eq!(st, StatusCode::OK);
    }
    h.clock.advance(Duration::from_secs(540)); // 63 minutes
    assert_eq!(
        h.call(&s, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn iam_3_sessions_list_logout_and_logout_all() {
    let h = Harness::new().await;
    h.bootstrap_owner().await;
    let a = h.login("owner", PW).await;
    let b = h.login("owner", PW).await;
    let c = h.login("owner", PW).await;
    let r = h.call(&a, "GET", "/v1/sessions", None).await;
    let list = r.body["sessions"].as_array().unwrap();
    assert!(list.len() >= 3);
    assert_eq!(list.iter().filter(|s| s["current"] == true).count(), 1);
    // Logout ends one session server-side and clears the cookie.
    let r = h.call(&c, "DELETE", "/v1/session", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(
        r.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(
        h.call(&c, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Logout-all from `a` ends `b` (and every other), keeps `a`.
    let r = h.call(&a, "POST", "/v1/sessions/revoke-all", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        h.call(&b, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        h.call(&a, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
}

async fn enrol_totp(h: &Harness, who: &Cred) -> (Vec<u8>, Vec<String>) {
    let r = h
        .call(
            who,
            "POST",
            "/v1/mfa/totp",
            Some(json!({"password": "wrong password!"})),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "enrolment re-authenticates"
    );
    let r = h
        .call(who, "POST", "/v1/mfa/totp", Some(json!({"password": PW})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let secret = base32_decode(r.body["secret"].as_str().unwrap());
    assert!(
        r.body["otpauth_uri"]
            .as_str()
            .unwrap()
            .starts_with("otpauth://totp/")
    );
    let now_s = u64::try_from(h.clock.now_ms() / 1000).unwrap();
    let code = totp::code_at(&secret, totp::Algorithm::Sha1, 6, 30, now_s);
    let r = h
        .call(
            who,
            "POST",
            "/v1/mfa/totp/confirm",
            Some(json!({"code": code})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let codes: Vec<String> = r.body["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes.len(), 10);
    (secret, codes)
}

fn base32_decode(s: &str) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut bits = 0u64;
    let mut n = 0;
    let mut out = Vec::new();
    for ch in s.bytes() {
        let v = alphabet.iter().position(|&a| a == ch).unwrap() as u64;
        bits = (bits << 5) | v;
        n += 5;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

/// Every file under `dir` (database, WAL, shared memory, data folder, key
/// directory) with its bytes.
fn stored_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((p, bytes));
            }
        }
    }
    out
}

async fn mfa_step(h: &Harness, pending: &Cred, body: Value) -> Resp {
    h.call(pending, "POST", "/v1/session/mfa", Some(body)).await
}

#[tokio::test]
async fn iam_4_totp_steps_are_single_use_with_one_step_of_drift() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let (secret, _) = enrol_totp(&h, &owner).await;
    // The secret is in the vault, not in the database in clear: not in the
    // database file, nor in its WAL and shared-memory files (where the
    // newest rows live until a checkpoint), nor in any other file the
    // service wrote, in raw, base32 or hex form.
    let stored = stored_files(h.dir.path());
    let wal = h.dir.path().join("a.db-wal");
    assert!(
        stored.iter().any(|(p, b)| *p == wal && !b.is_empty()),
        "the scan covers a non-empty WAL"
    );
    let b32 = totp::base32_encode(&secret);
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for (path, bytes) in &stored {
        for needle in [b32.as_bytes(), secret.as_slice(), hex.as_bytes()] {
            assert!(
                !contains(bytes, needle),
                "TOTP secret stored in clear in {}",
                path.display()
            );
        }
    }
    // Positive control: the scanned bytes hold that secret's vault row
    // (its name is not secret), so the scan sees where it was written.
    assert!(
        stored.iter().any(|(_, b)| contains(b, b"TOTP_")),
        "the scan must see the vault row"
    );
    let code_at = |offset: i64| {
        let t = u64::try_from(h.clock.now_ms() / 1000 + offset * 30).unwrap();
        totp::code_at(&secret, totp::Algorithm::Sha1, 6, 30, t)
    };
    h.clock.advance(Duration::from_secs(90));
    // Password alone gives a pending session that can do nothing else.
    let r = h.login_resp("owner", PW).await;
    assert_eq!(r.body["mfa_required"], true);
    let pending = session_of(&r);
    let denied = h.call(&pending, "GET", "/v1/runs", None).await;
    assert_eq!(denied.status, StatusCode::UNAUTHORIZED);
    assert_eq!(denied.body["error"]["code"], "mfa_required");
    // ±2 steps: refused.
    for off in [-2, 2] {
        let r = mfa_step(&h, &pending, json!({"code": code_at(off)})).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "offset {off}");
    }
    // −1 step: accepted, and the session rotates.
    let r = mfa_step(&h, &pending, json!({"code": code_at(-1)})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let full = session_of(&r);
    assert_ne!(full.cookie(), pending.cookie());
    assert_eq!(
        h.call(&full, "GET", "/v1/runs", None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        h.call(&pending, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Replaying that step (or an earlier one) on a new login: refused.
    let pending = session_of(&h.login_resp("owner", PW).await);
    let r = mfa_step(&h, &pending, json!({"code": code_at(-1)})).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The current and next steps are still fresh.
    let r = mfa_step(&h, &pending, json!({"code": code_at(0)})).await;
    assert_eq!(r.status, StatusCode::OK);
    let pending = session_of(&h.login_resp("owner", PW).await);
    let r = mfa_step(&h, &pending, json!({"code": code_at(0)})).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "same step twice");
    let r = mfa_step(&h, &pending, json!({"code": code_at(1)})).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn iam_4_recovery_codes_work_once_and_an_operator_reset_clears_mfa() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let (_, codes) = enrol_totp(&h, &owner).await;
    let pending = session_of(&h.login_resp("owner", PW).await);
    let r = mfa_step(
        &h,
        &pending,
        json!({"recovery_code": codes[3].to_uppercase()}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let pending = session_of(&h.login_resp("owner", PW).await);
    let r = mfa_step(&h, &pending, json!({"recovery_code": codes[3]})).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "a recovery code works once"
    );
    let r = mfa_step(&h, &pending, json!({"recovery_code": codes[4]})).await;
    assert_eq!(r.status, StatusCode::OK);

    // Operator-assisted reset: a single-use, expiring token (what `airlock
    // admin reset-password` stores).
    let store = h.store();
    let user = store.user_by_name("owner").await.unwrap().unwrap();
    let token = keys::new_prefixed_token("alr");
    store
        .create_reset_token(&user.id, &keys::token_hash(&token), T0, T0 + 3_600_000)
        .await
        .unwrap();
    let new_pw = "a brand new passphrase";
    let reset = |t: String| {
        h.call(
            &Cred::None,
            "POST",
            "/v1/password/reset",
            Some(json!({"token": t, "new_password": new_pw})),
        )
    };
    assert_eq!(reset(token.clone()).await.status, StatusCode::NO_CONTENT);
    assert_eq!(
        reset(token).await.status,
        StatusCode::FORBIDDEN,
        "single use"
    );
    // Old sessions are gone; the new password signs in without MFA.
    assert_eq!(
        h.call(&owner, "GET", "/v1/runs", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = h.login_resp("owner", new_pw).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["mfa_required"], false);
    // An expired token is refused.
    let token = keys::new_prefixed_token("alr");
    store
        .create_reset_token(&user.id, &keys::token_hash(&token), T0, T0 + 1000)
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(2));
    assert_eq!(reset(token).await.status, StatusCode::FORBIDDEN);
}

/// IAM-6: a run created by a member who is removed before it starts ends
/// `blocked` with `actor_not_authorized` (it never reaches the sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iam_6_queued_work_rechecks_its_actor_when_it_runs() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let asst = h.member(&owner, "asst", "human_assistant").await;
    let r = h.create_run(&asst).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(r.body["run"]["actor"].as_str().unwrap(), {
        h.store().user_by_name("asst").await.unwrap().unwrap().id
    });
    // Positive control: a member who stays is not refused.
    let stays = h.member(&owner, "stays", "human_assistant").await;
    let kept = h.create_run(&stays).await.body["run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    h.call(&owner, "DELETE", "/v1/members/asst", None).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exec = tokio::spawn(h.svc.clone().run_executor(stop_rx));
    let deadline = Instant::now() + Duration::from_secs(30);
    let run = loop {
        let run = h.store().get_run("ws_default", &id).await.unwrap().unwrap();
        if run.state.is_terminal() {
            break run;
        }
        assert!(Instant::now() < deadline, "run did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let other = loop {
        let run = h
            .store()
            .get_run("ws_default", &kept)
            .await
            .unwrap()
            .unwrap();
        if run.state.is_terminal() {
            break run;
        }
        assert!(Instant::now() < deadline, "control run did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = stop_tx.send(true);
    let _ = exec.await;
    assert_eq!(run.state, airlock_store::RunState::Blocked);
    assert_eq!(run.error_code.as_deref(), Some("actor_not_authorized"));
    assert_ne!(other.error_code.as_deref(), Some("actor_not_authorized"));
}
