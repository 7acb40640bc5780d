//! The HTTP surface as a contract (API-1 … API-7): the OpenAPI document and
//! the router describe the same routes, every response carries the
//! hardening headers and a request id, errors have one shape, rate limits
//! answer 429 with `Retry-After`, quotas survive a restart, event streams
//! are capped per user, and bad input of every kind gets a 4xx.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use common::LimitConfig;
use common::{Cred, ECHO, HELLO, Harness, Resp, request, request_builder, send};
use serde_json::{Value, json};
use tower::ServiceExt;

async fn harness(limits: LimitConfig) -> Harness {
    // `hello` with one optional number input.
    let hello = format!("{HELLO}[inputs.n]\ntype = \"number\"\nrequired = false\n");
    let b = Harness::builder().limits(limits);
    b.worker("hello", &hello, ECHO).build().await
}

impl Harness {
    /// Bootstraps an owner and returns an API key of theirs.
    async fn owner_key(&self) -> Cred {
        let owner = self.bootstrap_owner().await;
        Cred::Key(self.api_key(&owner, json!({"name": "t"})).await.0)
    }
}

fn assert_hardened(r: &Resp, what: &str) {
    for (h, want) in [
        ("x-content-type-options", Some("nosniff")),
        ("x-frame-options", Some("DENY")),
        ("referrer-policy", None),
        ("permissions-policy", None),
        (
            "content-security-policy",
            Some("default-src 'none'; frame-ancestors 'none'; sandbox"),
        ),
        ("cache-control", Some("no-store")),
        ("x-request-id", None),
    ] {
        let v = r.headers.get(h).unwrap_or_else(|| panic!("{what}: no {h}"));
        if let Some(w) = want {
            assert_eq!(v.to_str().unwrap(), w, "{what}: {h}");
        }
    }
    if r.status.is_client_error() || r.status.is_server_error() {
        assert_eq!(
            r.body["error"]["request_id"].as_str().unwrap(),
            r.headers["x-request-id"].to_str().unwrap(),
            "{what}: the error names the same request id as the header"
        );
        assert!(r.body["error"]["code"].is_string(), "{what}: {}", r.body);
        let text = String::from_utf8_lossy(&r.bytes).to_lowercase();
        for leak in [
            "sqlx",
            "sqlite",
            "postgres",
            "panicked",
            "/work/",
            "/tmp/",
            "backtrace",
        ] {
            assert!(!text.contains(leak), "{what}: leaks {leak:?}: {text}");
        }
    }
}

fn doc_routes(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in ["get", "post", "put", "delete", "patch"] {
            if item.get(m).is_some() {
                out.push((m.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

/// API-1: every route in the document is served (not the router's
/// fallback, not 405), every route the router serves is in the document,
/// and the document is OpenAPI 3.1.
#[tokio::test]
async fn api_1_the_openapi_document_and_the_router_describe_the_same_routes() {
    let h = harness(LimitConfig::unlimited()).await;
    let r = h.call(&Cred::None, "GET", "/v1/openapi.json", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["openapi"].as_str().unwrap().starts_with("3.1"));
    let documented = doc_routes(&r.body);
    assert!(documented.len() >= 48, "{documented:?}");
    for (m, p) in &documented {
        let concrete = p
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let r = h.call(&Cred::None, m, &concrete, Some(json!({}))).await;
        assert_ne!(
            r.body["error"]["code"], "no_route",
            "{m} {p} is documented but not routed"
        );
        assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{m} {p}");
    }
    // And the other way round: what the router serves is documented.
    // (Every route is registered through `api_router`, which builds both;
    // this list catches a route added by hand.)
    let served = [
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/v1/openapi.json"),
        ("POST", "/v1/bootstrap"),
        ("POST", "/v1/session"),
        ("GET", "/v1/session"),
        ("DELETE", "/v1/session"),
        ("POST", "/v1/session/mfa"),
        ("GET", "/v1/sessions"),
        ("POST", "/v1/sessions/revoke-all"),
        ("DELETE", "/v1/sessions/{id}"),
        ("POST", "/v1/mfa/totp"),
        ("POST", "/v1/mfa/totp/confirm"),
        ("POST", "/v1/password/reset"),
        ("GET", "/v1/keys"),
        ("POST", "/v1/keys"),
        ("DELETE", "/v1/keys/{id}"),
        ("GET", "/v1/workspaces"),
        ("POST", "/v1/workspaces"),
        ("GET", "/v1/members"),
        ("PUT", "/v1/members/{username}"),
        ("DELETE", "/v1/members/{username}"),
        ("GET", "/v1/audit"),
        ("GET", "/v1/workers"),
        ("GET", "/v1/workers/{id}"),
        ("POST", "/v1/workers/validate"),
        ("POST", "/v1/workers/reload"),
        ("GET", "/v1/runs/{id}/logs"),
        ("GET", "/v1/roles"),
        ("GET", "/v1/audit/verify"),
        ("GET", "/v1/audit/export"),
        ("POST", "/v1/uploads"),
        ("GET", "/v1/uploads/{id}"),
        ("GET", "/v1/uploads/{id}/content"),
        ("POST", "/v1/workers/{id}/webhook/secret"),
        ("POST", "/v1/hooks/{workspace}/{worker}"),
        ("POST", "/v1/workers/{id}/runs"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/runs/{id}"),
        ("POST", "/v1/runs/{id}/cancel"),
        ("POST", "/v1/runs/{id}/retry"),
        ("POST", "/v1/runs/{id}/resolve"),
        ("GET", "/v1/runs/{id}/events"),
        ("GET", "/v1/runs/{id}/artifacts/{name}"),
        ("POST", "/v1/plans"),
        ("POST", "/v1/plans/run"),
        ("GET", "/v1/secrets"),
        ("PUT", "/v1/secrets/{name}"),
        ("DELETE", "/v1/secrets/{name}"),
        ("GET", "/v1/retention"),
        ("PUT", "/v1/retention"),
        ("GET", "/v1/retention/preview"),
        ("POST", "/v1/retention/apply"),
        ("POST", "/v1/workspaces/{id}/delete"),
    ];
    for (m, p) in served {
        assert!(
            documented.iter().any(|(dm, dp)| dm == m && dp == p),
            "{m} {p} is served but not documented"
        );
    }
    // Positive control: an undocumented path is the router's fallback.
    let r = h.call(&Cred::None, "GET", "/v1/not-a-route", None).await;
    assert_eq!(r.body["error"]["code"], "no_route");
}

/// API-3: hardening headers and a request id on 2xx, 4xx and 5xx.
#[tokio::test]
async fn api_3_every_response_is_hardened_including_errors() {
    let h = harness(LimitConfig::unlimited()).await;
    let key = h.owner_key().await;
    let mut samples = vec![
        (
            "GET /healthz",
            h.call(&Cred::None, "GET", "/healthz", None).await,
        ),
        ("GET /v1/runs", h.call(&key, "GET", "/v1/runs", None).await),
        (
            "GET /v1/openapi.json",
            h.call(&Cred::None, "GET", "/v1/openapi.json", None).await,
        ),
        ("401", h.call(&Cred::None, "GET", "/v1/runs", None).await),
        (
            "404 object",
            h.call(&key, "GET", "/v1/runs/run_x", None).await,
        ),
        ("404 route", h.call(&Cred::None, "GET", "/nope", None).await),
        ("405", h.call(&Cred::None, "PATCH", "/v1/runs", None).await),
        (
            "400",
            h.call(&key, "POST", "/v1/plans", Some(json!({"worker": 5})))
                .await,
        ),
    ];
    assert_eq!(samples[0].1.status, StatusCode::OK);
    assert_eq!(samples[6].1.status, StatusCode::METHOD_NOT_ALLOWED);
    // A 5xx: the database goes away under the server.
    h.store().pool().close().await;
    samples.push(("503", h.call(&Cred::None, "GET", "/readyz", None).await));
    samples.push(("500", h.call(&key, "GET", "/v1/runs", None).await));
    assert_eq!(samples[8].1.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        samples[9].1.status.is_server_error(),
        "{}",
        samples[9].1.body
    );
    assert_eq!(samples[9].1.body["error"]["message"], "internal error");
    for (what, r) in &samples {
        assert_hardened(r, what);
    }
}

/// API-4: 25 rapid unauthenticated requests from one address get 401s,
/// then 429 with Retry-After; an authenticated caller's own bucket is
/// separate.
#[tokio::test]
async fn api_4_rapid_unauthenticated_requests_get_401_then_429() {
    let h = harness(LimitConfig::default()).await;
    let mut codes = Vec::new();
    let mut retry = None;
    for _ in 0..25 {
        let r = h.call(&Cred::None, "GET", "/v1/runs", None).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            retry = r
                .headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            assert_hardened(&r, "429");
        }
        codes.push(r.status.as_u16());
    }
    assert_eq!(codes[0], 401);
    assert_eq!(*codes.last().unwrap(), 429, "{codes:?}");
    let first_429 = codes.iter().position(|c| *c == 429).unwrap();
    assert!(codes[..first_429].iter().all(|c| *c == 401), "{codes:?}");
    assert!(codes[first_429..].iter().all(|c| *c == 429), "{codes:?}");
    assert!(retry.unwrap().parse::<u64>().unwrap() >= 1);
    // Health stays reachable for probes.
    assert_eq!(
        h.call(&Cred::None, "GET", "/healthz", None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn api_4_identity_buckets_answer_429_with_retry_after() {
    let h = harness(LimitConfig {
        reads_per_identity: Some(airlock_api::limits::Bucket {
            burst: 5,
            per_second: 1,
        }),
        ..LimitConfig::unlimited()
    })
    .await;
    let key = h.owner_key().await;
    let mut codes = Vec::new();
    for _ in 0..8 {
        codes.push(h.call(&key, "GET", "/v1/runs", None).await.status.as_u16());
    }
    assert_eq!(&codes[..5], &[200; 5], "{codes:?}");
    assert_eq!(codes[7], 429, "{codes:?}");
    let r = h.call(&key, "GET", "/v1/runs", None).await;
    assert!(r.headers.contains_key("retry-after"));
    // Writes have their own bucket.
    let r = h
        .call(
            &key,
            "PUT",
            "/v1/secrets/X_ONE",
            Some(json!({"value": "v"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// API-4: the daily run quota is in the database; a restart does not
/// reset it.
#[tokio::test]
async fn api_4_run_quotas_are_durable_across_a_restart() {
    let limits = LimitConfig {
        runs_per_user_per_day: 2,
        ..LimitConfig::unlimited()
    };
    let h = harness(limits).await;
    let key = h.owner_key().await;
    for _ in 0..2 {
        let r = h
            .call(
                &key,
                "POST",
                "/v1/workers/hello/runs",
                Some(json!({"input": {}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let r = h
        .call(
            &key,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.body["error"]["code"], "quota_exceeded");
    assert!(r.headers.contains_key("retry-after"));
    // A refused input does not spend quota (positive control on a fresh user
    // is implicit: the two above succeeded).
    // Restart: a new service and router on the same database.
    h.store().pool().close().await;
    let (app2, _svc2) = h.reopen().await;
    let body = json!({"input": {}});
    let req = request(&key, "POST", "/v1/workers/hello/runs", Some(&body), None);
    let r = send(app2, req).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "quota_exceeded");
}

/// API-6: a per-user cap on concurrent event streams; closing one frees
/// its slot.
#[tokio::test]
async fn api_6_event_streams_are_capped_per_user() {
    let h = harness(LimitConfig {
        streams_per_user: 2,
        ..LimitConfig::unlimited()
    })
    .await;
    let key = h.owner_key().await;
    let r = h
        .call(
            &key,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
        )
        .await;
    let id = r.body["run"]["id"].as_str().unwrap().to_string();
    let open = |k: Cred, id: String| {
        let app = h.app.clone();
        async move {
            let req = request(&k, "GET", &format!("/v1/runs/{id}/events"), None, None);
            app.oneshot(req).await.unwrap()
        }
    };
    // The run stays queued (no executor): the streams stay open.
    let a = open(key.clone(), id.clone()).await;
    let b = open(key.clone(), id.clone()).await;
    assert_eq!(a.status(), StatusCode::OK);
    assert_eq!(b.status(), StatusCode::OK);
    let c = open(key.clone(), id.clone()).await;
    assert_eq!(c.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(c.headers().contains_key("retry-after"));
    drop(a);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = open(key.clone(), id.clone()).await;
    assert_eq!(d.status(), StatusCode::OK, "a closed stream frees its slot");
    drop((b, d));
}

/// Bad input on every body-taking route: wrong content type, invalid JSON,
/// huge bodies, deep nesting, unknown fields, wrong types; bad page sizes.
/// Always a 4xx with the error shape and nothing internal.
#[tokio::test]
async fn api_5_bad_input_on_every_route_is_a_clear_4xx() {
    let h = harness(LimitConfig::unlimited()).await;
    let key = h.owner_key().await;
    let doc = h
        .call(&Cred::None, "GET", "/v1/openapi.json", None)
        .await
        .body;
    let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(2 << 20));
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("text/plain", b"{}".to_vec()),
        ("application/json", b"{not json".to_vec()),
        ("application/json", vec![0xff, 0xfe, 0xfd]),
        ("application/json", deep.into_bytes()),
        ("application/json", huge.into_bytes()),
        (
            "application/json",
            br#"{"unknown_field": 1, "another": [1,2]}"#.to_vec(),
        ),
        (
            "application/json",
            br#"{"name": 5, "value": [], "token": {}, "input": "x", "role": 7}"#.to_vec(),
        ),
        ("application/json", b"[]".to_vec()),
        ("application/json", b"null".to_vec()),
    ];
    let mut checked = 0;
    for (m, p) in doc_routes(&doc) {
        let op = &doc["paths"][&p][m.to_lowercase()];
        if op.get("requestBody").is_none() || p.contains("/hooks/") || p == "/v1/uploads" {
            continue;
        }
        let concrete = p
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for (ct, b) in &bodies {
            let req = request_builder(&key, &m, &concrete, None)
                .header("content-type", *ct)
                .body(Body::from(b.clone()))
                .unwrap();
            let r = h.send(req).await;
            assert!(
                r.status.is_client_error(),
                "{m} {p} with {ct} {:?}…: {} {}",
                String::from_utf8_lossy(&b[..b.len().min(40)]),
                r.status,
                r.body
            );
            assert_hardened(&r, &format!("{m} {p}"));
            checked += 1;
        }
    }
    assert!(checked > 80, "{checked}");
    for q in [
        "limit=-1",
        "limit=0",
        "limit=100000",
        "limit=99999999999999999999",
        "limit=x",
        "state=nope",
        "bogus=1",
        "cursor=%00",
    ] {
        let r = h.call(&key, "GET", &format!("/v1/runs?{q}"), None).await;
        assert!(
            r.status.is_client_error() || (q.starts_with("cursor") && r.status.is_success()),
            "{q}: {}",
            r.status
        );
        assert_hardened(&r, q);
    }
}

/// API-7: `/metrics` for administrators only, in Prometheus text format.
#[tokio::test]
async fn api_7_metrics_are_for_administrators() {
    let h = harness(LimitConfig::unlimited()).await;
    let key = h.owner_key().await;
    assert_eq!(
        h.call(&Cred::None, "GET", "/metrics", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = h.call(&key, "GET", "/metrics", None).await;
    assert_eq!(r.status, StatusCode::OK);
    let text = String::from_utf8(r.bytes).unwrap();
    for m in [
        "airlock_runs",
        "airlock_queue_depth",
        "airlock_run_duration_seconds_bucket",
        "airlock_sandbox_launches_total",
        "airlock_egress_decisions_total",
        "airlock_rate_limited_total",
    ] {
        assert!(text.contains(m), "{m} missing:\n{text}");
    }
    assert_eq!(
        h.call(&Cred::None, "GET", "/readyz", None).await.body["status"],
        "ready"
    );
}

/// API-2: the rest of the surface — a worker by id, manifest validation,
/// a run's log, the role table, audit verification and export.
#[tokio::test]
async fn api_2_workers_logs_roles_and_audit_routes() {
    let h = harness(LimitConfig::unlimited()).await;
    let key = h.owner_key().await;
    let r = h.call(&key, "GET", "/v1/workers/hello", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["worker"]["id"], "hello");
    let r = h.call(&key, "GET", "/v1/workers/nope", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = h
        .call(
            &key,
            "POST",
            "/v1/workers/validate",
            Some(json!({"manifest": "[worker]\nid = \"Bad Id\"\n"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["valid"], false);
    assert!(!r.body["problems"].as_array().unwrap().is_empty());
    let good = std::fs::read_to_string(h.dir.path().join("workers/hello/worker.toml")).unwrap();
    let r = h
        .call(
            &key,
            "POST",
            "/v1/workers/validate",
            Some(json!({"manifest": good})),
        )
        .await;
    assert_eq!(r.body["valid"], true, "{}", r.body);
    let run = h
        .call(
            &key,
            "POST",
            "/v1/workers/hello/runs",
            Some(json!({"input": {}})),
        )
        .await
        .body["run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = h
        .call(&key, "GET", &format!("/v1/runs/{run}/logs"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let r = h.call(&key, "GET", "/v1/roles", None).await;
    assert_eq!(r.body["roles"].as_array().unwrap().len(), 6);
    assert_eq!(r.body["yours"], "owner");
    // The audit list pages by sequence number.
    let p1 = h.call(&key, "GET", "/v1/audit?limit=1", None).await;
    assert_eq!(p1.body["events"][0]["seq"], 1, "{}", p1.body);
    let cur = p1.body["next_cursor"].as_i64().unwrap();
    let p2 = h
        .call(&key, "GET", &format!("/v1/audit?limit=1&after={cur}"), None)
        .await;
    assert_eq!(p2.body["events"][0]["seq"], 2, "{}", p2.body);
    for q in ["limit=0", "limit=501", "after=x", "bogus=1"] {
        let r = h.call(&key, "GET", &format!("/v1/audit?{q}"), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}");
    }
    let r = h.call(&key, "GET", "/v1/audit/verify", None).await;
    assert_eq!(r.body["ok"], true, "{}", r.body);
    let n = r.body["events"].as_u64().unwrap();
    assert!(n >= 2);
    let r = h.call(&key, "GET", "/v1/audit/export", None).await;
    assert_eq!(r.status, StatusCode::OK);
    let text = String::from_utf8(r.bytes).unwrap();
    assert!(text.lines().count() as u64 >= n);
    for line in text.lines() {
        airlock_audit::from_json_line(line).unwrap();
    }
}

/// API-3 (claim 107): a run's HTML and SVG artifacts are served so that no
/// browser renders them on this origin: inert `text/plain`, as an
/// attachment, with `nosniff` and a sandboxing CSP. Control: a PNG keeps
/// its type. And were an active type ever recorded (a sniffer bug, a
/// tampered row), the API still downgrades it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_3_html_and_svg_artifacts_are_never_rendered_on_this_origin() {
    // The workload's files, written by a recording launcher (this test
    // binary cannot be a sandbox init): what reaches the artifact store is
    // exactly what a real workload would leave in /airlock/output.
    let files: [(&str, &[u8]); 3] = [
        (
            "page.html",
            b"<html><body><script>alert(document.cookie)</script></body></html>",
        ),
        (
            "pic.svg",
            b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"/>",
        ),
        ("dot.png", b"\x89PNG\r\n\x1a\n0000"),
    ];
    let launcher = airlock_launch::RecordingLauncher::answering(move |launch, _| {
        let out = &launch
            .sandbox
            .mounts
            .iter()
            .find(|m| m.writable)
            .expect("the output mount")
            .source;
        for (name, bytes) in files {
            std::fs::write(out.join(name), bytes).unwrap();
        }
        Ok(airlock_launch::Launched {
            result: airlock_launch::fake_result(Some(0), None),
            egress: None,
            notices: Vec::new(),
        })
    });
    let h = Harness::builder()
        .worker("pages", &HELLO.replace("\"hello\"", "\"pages\""), ECHO)
        .launcher(std::sync::Arc::new(launcher))
        .build()
        .await;
    let key = h.owner_key().await;
    let r = h
        .call(&key, "POST", "/v1/workers/pages/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["run"]["id"].as_str().unwrap().to_string();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exec = tokio::spawn(h.svc.clone().run_executor(stop_rx));
    let run = loop {
        let run = h.store().get_run("ws_default", &id).await.unwrap().unwrap();
        if run.state.is_terminal() {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop_tx.send(true);
    let _ = exec.await;
    assert_eq!(run.state.as_str(), "succeeded", "{run:?}");
    let get = |name: &str| {
        let path = format!("/v1/runs/{id}/artifacts/{name}");
        let key = key.clone();
        let h = &h;
        async move { h.call(&key, "GET", &path, None).await }
    };
    for name in ["page.html", "pic.svg"] {
        let r = get(name).await;
        assert_eq!(r.status, StatusCode::OK, "{name}");
        assert!(
            r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
            "{name}: {:?}",
            r.headers["content-type"]
        );
        assert!(
            r.headers["content-disposition"]
                .to_str()
                .unwrap()
                .starts_with("attachment"),
            "{name}"
        );
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
        assert!(
            r.headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("sandbox"),
            "{name}"
        );
        assert!(
            r.text.contains("alert"),
            "{name}: the bytes are served as written"
        );
    }
    // Control: a type that cannot run script keeps its type.
    let r = get("dot.png").await;
    assert_eq!(r.headers["content-type"], "image/png");
    // An active type recorded anyway is still served as inert text.
    let png = h
        .store()
        .artifacts("ws_default", &id)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.name == "page.html")
        .unwrap();
    let r2 = h
        .call(&key, "POST", "/v1/workers/pages/runs", Some(json!({})))
        .await;
    let id2 = r2.body["run"]["id"].as_str().unwrap().to_string();
    let claim = h
        .store()
        .claim_run("test:1", Duration::from_secs(30), &id2)
        .await
        .unwrap()
        .unwrap();
    let forged = airlock_store::Artifact {
        name: "forged.html".into(),
        media_type: "text/html".into(),
        ..png
    };
    h.store()
        .add_artifact(&id2, claim.token, &forged)
        .await
        .unwrap();
    let r = h
        .call(
            &key,
            "GET",
            &format!("/v1/runs/{id2}/artifacts/forged.html"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
}

/// KEY-4: the secrets list names what workers declare, set or not: a
/// declared name not set yet is version 0 with the workers that use it,
/// and a set one keeps its workers after it is stored.
#[tokio::test]
async fn key_4_declared_secrets_are_listed_as_missing_until_set() {
    let mailer = format!("{HELLO}\n[secrets]\nnames = [\"MAIL_TOKEN\"]\n");
    let h = Harness::builder()
        .worker("hello", &mailer, ECHO)
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let r = h.call(&owner, "GET", "/v1/secrets", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body["secrets"],
        json!([{"name": "MAIL_TOKEN", "version": 0, "updated_at": 0,
                "last_used_at": null, "used_by": ["hello"]}])
    );
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/secrets/MAIL_TOKEN",
            Some(json!({"value": "v-123"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = h.call(&owner, "GET", "/v1/secrets", None).await;
    let list = r.body["secrets"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{}", r.body);
    assert_eq!(list[0]["version"], 1);
    assert_eq!(list[0]["used_by"], json!(["hello"]));
}

/// AUD-3: the audit listing filters by event type (exact or a prefix
/// with `*`) and by actor (id or kind); paging goes on from where the
/// filtered read stopped.
#[tokio::test]
async fn aud_3_the_audit_listing_filters_by_type_and_actor() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    h.member(&owner, "vic", "viewer").await;
    h.member(&owner, "ann", "viewer").await;
    let all = h.call(&owner, "GET", "/v1/audit?limit=500", None).await;
    let added: Vec<&Value> = all.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "member.added")
        .collect();
    assert_eq!(added.len(), 2, "{}", all.body);
    let owner_id = added[0]["actor"]["id"].as_str().unwrap();
    let r = h
        .call(&owner, "GET", "/v1/audit?event_type=member.*&limit=1", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["events"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["events"][0]["event_type"], "member.added");
    let next = r.body["next_cursor"].as_i64().unwrap();
    let r = h
        .call(
            &owner,
            "GET",
            &format!("/v1/audit?event_type=member.added&after={next}"),
            None,
        )
        .await;
    assert_eq!(r.body["events"].as_array().unwrap().len(), 1, "{}", r.body);
    assert_eq!(r.body["next_cursor"], Value::Null);
    let r = h
        .call(
            &owner,
            "GET",
            &format!("/v1/audit?actor={owner_id}&event_type=member.added"),
            None,
        )
        .await;
    assert_eq!(r.body["events"].as_array().unwrap().len(), 2, "{}", r.body);
    let r = h.call(&owner, "GET", "/v1/audit?actor=nobody", None).await;
    assert_eq!(r.body["events"], json!([]));
    let r = h
        .call(
            &owner,
            "GET",
            &format!("/v1/audit?actor={}", "x".repeat(129)),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
}
