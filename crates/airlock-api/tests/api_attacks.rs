//! Attacks on the HTTP surface (API-3 … API-9), each with a positive control: rate-limit
//! evasion, quota races, SSE slots, upload names/types/links, webhook header, path, timestamp
//! and replay tricks, `/metrics` access, and the error shape of router-level rejections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use airlock_api::limits::Bucket;
use airlock_store::DEFAULT_WORKSPACE as WS;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use base64::Engine;
use common::LimitConfig;
use common::{
    Cred, Db, ECHO, HELLO, Harness, Resp, T0, on_both_backends, request, request_builder,
};
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sha2::Sha256;
use tower::ServiceExt;

fn hook_manifest(id: &str, format: &str) -> String {
    format!(
        "[worker]\nid = \"{id}\"\ntitle = \"{id}\"\nkind = \"script\"\nentry = \"run.sh\"\n\
         runtime = \"sh\"\n\n[[triggers]]\nkind = \"webhook\"\nformat = \"{format}\"\n"
    )
}

async fn harness(limits: LimitConfig, proxies: Vec<IpAddr>) -> Harness {
    harness_on(Db::Sqlite, limits, proxies).await
}

/// [`harness`] with its store on `db`.
async fn harness_on(db: Db, limits: LimitConfig, proxies: Vec<IpAddr>) -> Harness {
    let hello = format!("{HELLO}[inputs.n]\ntype = \"number\"\nrequired = false\n");
    let auth = common::AuthConfig {
        trusted_proxies: proxies,
        ..common::quiet()
    };
    let mut b = Harness::builder().db(db).limits(limits).auth(auth);
    b = b.worker("hello", &hello, ECHO);
    for (id, f) in [("std-hook", "standard"), ("gh-hook", "github")] {
        b = b.worker(id, &hook_manifest(id, f), ECHO);
    }
    b.build().await
}

/// No limits but what `f` sets.
fn lim(f: impl FnOnce(&mut LimitConfig)) -> LimitConfig {
    let mut l = LimitConfig::unlimited();
    f(&mut l);
    l
}

/// Only the 401 bucket: burst 3, one more per second.
fn failures_only() -> LimitConfig {
    let b = Bucket {
        burst: 3,
        per_second: 1,
    };
    lim(|l| l.auth_failures_per_client = Some(b))
}

/// An owner session and an API key of theirs.
async fn owner(h: &Harness) -> (Cred, Cred) {
    let o = h.bootstrap_owner().await;
    let k = Cred::Key(h.api_key(&o, json!({"name": "k"})).await.0);
    (o, k)
}

/// An unlimited harness, its owner's session and key.
async fn setup() -> (Harness, Cred, Cred) {
    let h = harness(lim(|_| ()), vec![]).await;
    let (o, k) = owner(&h).await;
    (h, o, k)
}

/// A GET from a peer address (as `into_make_service_with_connect_info` sets
/// it), with an optional `X-Forwarded-For`; the status.
async fn from(h: &Harness, peer: &str, c: &Cred, path: &str, xff: &str) -> u16 {
    let addr = SocketAddr::new(peer.parse().unwrap(), 40000);
    let b = request_builder(c, "GET", path, None).extension(ConnectInfo(addr));
    let b = if xff.is_empty() {
        b
    } else {
        b.header("x-forwarded-for", xff)
    };
    h.send(b.body(Body::empty()).unwrap()).await.status.as_u16()
}

/// Six unauthenticated `GET /v1/runs` from `peer`, one per `X-Forwarded-For`.
async fn six(h: &Harness, peer: &str, xff: impl Fn(i32) -> String) -> Vec<u16> {
    let mut codes = Vec::new();
    for i in 0..6 {
        codes.push(from(h, peer, &Cred::None, "/v1/runs", &xff(i)).await);
    }
    codes
}

const LOCKED: [u16; 6] = [401, 401, 401, 401, 429, 429];

/// A request with a raw body and an optional content type.
fn raw(c: &Cred, m: &str, p: &str, ct: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut b = request_builder(c, m, p, None);
    if let Some(ct) = ct {
        b = b.header("content-type", ct);
    }
    b.body(body.into()).unwrap()
}

/// The one error shape, the request id of the header, hardening headers.
fn assert_shape(r: &Resp, status: StatusCode, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text);
    let e = r.body["error"].as_object().expect(what);
    let keys: Vec<&String> = e.keys().collect();
    assert_eq!(keys, ["code", "message", "request_id"], "{what}");
    assert_eq!(e["request_id"], r.headers["x-request-id"].to_str().unwrap());
    let want = "x-content-type-options=nosniff x-frame-options=DENY referrer-policy \
                permissions-policy cache-control=no-store content-security-policy";
    for hv in want.split(' ') {
        let (h, v) = hv.split_once('=').unwrap_or((hv, ""));
        let got = r.headers.get(h).map(|v| v.to_str().unwrap());
        assert!(got.is_some_and(|g| g.starts_with(v)), "{what}: {h}");
    }
    let csp = &r.headers["content-security-policy"];
    assert_eq!(
        csp, "default-src 'none'; frame-ancestors 'none'; sandbox",
        "{what}"
    );
}

#[tokio::test]
async fn xff_is_ignored_without_a_trusted_proxy_and_honoured_with_one() {
    let h = harness(failures_only(), vec![]).await;
    let codes = six(&h, "198.51.100.7", |i| format!("203.0.113.{i}")).await;
    assert_eq!(codes, LOCKED, "spoofed XFF gave fresh buckets");
    // Positive control: another peer has its own bucket.
    let code = from(&h, "198.51.100.8", &Cred::None, "/v1/runs", "").await;
    assert_eq!(code, 401);
    // With the peer trusted, the forwarded client is the key...
    let h = harness(failures_only(), vec!["10.0.0.1".parse().unwrap()]).await;
    let codes = six(&h, "10.0.0.1", |i| format!("203.0.113.{i}")).await;
    assert_eq!(codes, [401; 6]);
    // ...but a client cannot choose it by prepending hops of its own.
    let codes = six(&h, "10.0.0.1", |i| format!("192.0.2.{i}, 203.0.113.9")).await;
    assert_eq!(codes, LOCKED);
    // Invented keys and cookies get no fresh buckets either.
    let mut codes = Vec::new();
    for i in 0..3 {
        let key = Cred::Key(format!("alk_{i:0>40}"));
        let ck = Cred::CookieOnly(format!("airlock_session=bogus{i}"));
        for c in [key, ck] {
            codes.push(from(&h, "10.0.0.2", &c, "/v1/runs", "").await);
        }
    }
    assert_eq!(codes, LOCKED);
}

#[tokio::test]

async fn ipv6_addresses_of_one_prefix_share_a_bucket() {
    let h = harness(failures_only(), vec![]).await;
    let mut codes = Vec::new();
    for i in 1..=6 {
        let peer = format!("2001:db8:1:2::{i:x}");
        codes.push(from(&h, &peer, &Cred::None, "/v1/runs", "").await);
    }
    assert_eq!(codes, LOCKED);
}

/// A 401 storm from one address also refuses a valid key from that address
/// until the bucket refills (per-address lockout is the design; other
/// addresses, health probes and webhooks are unaffected).
#[tokio::test]
async fn a_401_storm_locks_out_its_own_address_only_and_briefly() {
    let h = harness(failures_only(), vec![]).await;
    let (_, key) = owner(&h).await;
    let (ip, runs) = ("198.51.100.9", "/v1/runs");
    assert_eq!(from(&h, ip, &key, runs, "").await, 200);
    six(&h, ip, |_| String::new()).await;
    assert_eq!(from(&h, ip, &key, runs, "").await, 429, "locked out");
    assert_eq!(from(&h, "198.51.100.10", &key, runs, "").await, 200);
    for p in ["/healthz", "/readyz"] {
        assert_eq!(from(&h, ip, &Cred::None, p, "").await, 200, "{p}");
    }
    let addr = SocketAddr::new(ip.parse().unwrap(), 1);
    let hook = Request::post(format!("/v1/hooks/{WS}/std-hook"));
    let hook = hook.extension(ConnectInfo(addr)).body(Body::empty());
    let r = h.send(hook.unwrap()).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "hooks are exempt");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(from(&h, ip, &key, runs, "").await, 200);
}

fn create(key: &Cred, idem: Option<&str>, input: Value) -> Request<Body> {
    let mut b = request_builder(key, "POST", "/v1/workers/hello/runs", None);
    if let Some(k) = idem {
        b = b.header("idempotency-key", k);
    }
    let body = Body::from(json!({ "input": input }).to_string());
    b.header("content-type", "application/json")
        .body(body)
        .unwrap()
}

async fn ws_used(h: &Harness) -> i64 {
    let day = T0 - T0.rem_euclid(86_400_000);
    let subject = format!("ws:{WS}");
    h.store().quota_used(&subject, day).await.unwrap()
}

/// Taking a unit of quota is one atomic statement on both backends; the
/// race is run on each.
async fn parallel_creates_cannot_race_past_the_daily_quota(db: Db) {
    let h = harness_on(db, lim(|l| l.runs_per_workspace_per_day = 3), vec![]).await;
    let (_, key) = owner(&h).await;
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (app, req) = (h.app.clone(), create(&key, None, json!({})));
            tokio::spawn(async move { common::send(app, req).await })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r.status == StatusCode::CREATED {
            ok += 1;
        } else {
            assert_eq!(r.body["error"]["code"], "quota_exceeded", "{}", r.body);
        }
    }
    assert_eq!(ok, 3);
    assert_eq!(ws_used(&h).await, 3);
    let runs = h.store().list_runs(WS, None, 100, None).await.unwrap();
    assert_eq!(runs.len(), 3);
}
on_both_backends!(
    parallel_creates_cannot_race_past_the_daily_quota,
    flavor = "multi_thread",
    worker_threads = 4
);

async fn replays_and_failed_creations_do_not_consume_quota(db: Db) {
    let h = harness_on(db, lim(|l| l.runs_per_workspace_per_day = 2), vec![]).await;
    let (_, key) = owner(&h).await;
    let a = h.send(create(&key, Some("A"), json!({}))).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    for _ in 0..3 {
        let r = h.send(create(&key, Some("A"), json!({}))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["run"]["id"], a.body["run"]["id"]);
    }
    // Same key, other request (409); invalid input (4xx); unknown worker (404).
    let r = h.send(create(&key, Some("A"), json!({"n": 2}))).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    let r = h.send(create(&key, None, json!({"n": "x"}))).await;
    assert!(r.status.is_client_error(), "{}", r.body);
    let nope = Some(json!({"input": {}}));
    let r = h.call(&key, "POST", "/v1/workers/nope/runs", nope).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(ws_used(&h).await, 1);
    // Positive control: the second unit is still there, then none.
    let r = h.send(create(&key, Some("B"), json!({}))).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = h.send(create(&key, Some("C"), json!({}))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}
on_both_backends!(replays_and_failed_creations_do_not_consume_quota);

async fn an_idempotent_replay_at_the_quota_limit_returns_the_original_run(db: Db) {
    let h = harness_on(db, lim(|l| l.runs_per_workspace_per_day = 1), vec![]).await;
    let (_, key) = owner(&h).await;
    let a = h.send(create(&key, Some("A"), json!({}))).await;
    assert_eq!(a.status, StatusCode::CREATED);
    let r = h.send(create(&key, Some("A"), json!({}))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["run"]["id"], a.body["run"]["id"]);
}
on_both_backends!(an_idempotent_replay_at_the_quota_limit_returns_the_original_run);

#[tokio::test]
async fn an_aborted_stream_frees_its_slot_and_users_are_independent() {
    let h = harness(lim(|l| l.streams_per_user = 1), vec![]).await;
    let (owner, key) = owner(&h).await;
    let dev = h.member(&owner, "dev", "developer").await;
    let r = h.send(create(&key, None, json!({}))).await;
    let path = format!("/v1/runs/{}/events", r.body["run"]["id"].as_str().unwrap());
    let open = |c: &Cred| h.app.clone().oneshot(request(c, "GET", &path, None, None));
    let a = open(&owner).await.unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    // A client that reads, then goes away mid-stream.
    let reader = tokio::spawn(async move {
        let mut body = a.into_body();
        while body.frame().await.is_some() {}
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = open(&key).await.unwrap().status();
    assert_eq!(again, StatusCode::TOO_MANY_REQUESTS, "same user");
    let other = open(&dev).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK, "another user's own cap");
    reader.abort();
    let _ = reader.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let freed = open(&owner).await.unwrap().status();
    assert_eq!(freed, StatusCode::OK, "the aborted stream's slot");
}

async fn upload(h: &Harness, c: &Cred, name: &str, ct: &str, body: &[u8]) -> Resp {
    let p = format!("/v1/uploads?name={name}");
    h.send(raw(c, "POST", &p, Some(ct), body.to_vec())).await
}

#[tokio::test]
async fn upload_names_and_content_types_through_the_query_string() {
    let (h, owner, _) = setup().await;
    let (long, huge) = ("a".repeat(1025), "b".repeat(20_000));
    let seg = format!("{}.txt", "c".repeat(300));
    let names = "a%00.txt %2e%2e %2e%2e%2fx %252e%252e%252fx x%2F..%2F..%2Fy %2Fetc \
                 ..%5Cx a%0Ab %E2%80%AEtxt.exe %E2%80%A5/x C%3A";
    for name in names.split(' ').chain(["", &long, &huge, &seg]) {
        let r = upload(&h, &owner, name, "text/plain", b"x").await;
        assert_shape(&r, StatusCode::BAD_REQUEST, name);
        assert_eq!(r.body["error"]["code"], "invalid_name", "{name}");
    }
    let html = b"<!doctype html><html><script>alert(1)</script></html>";
    let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"/>";
    for (ct, body) in [
        ("text/html", &html[..]),
        ("text/html; charset=utf-8", html),
        ("image/svg+xml", svg),
        ("application/json; charset=utf-16", b"{\"a\":1}"),
        ("text/plain; charset=utf-8; charset=utf-16", b"hi"),
        ("text/plain, text/html", b"hi"),
    ] {
        let r = upload(&h, &owner, "x.txt", ct, body).await;
        assert_shape(&r, StatusCode::UNSUPPORTED_MEDIA_TYPE, ct);
    }
    // Positive control; active content declared as octet-stream is stored inert.
    for (ct, body) in [
        ("text/plain; charset=utf-8", &b"hello"[..]),
        ("application/octet-stream", html),
        ("application/octet-stream", svg),
    ] {
        let r = upload(&h, &owner, "page.html", ct, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{ct}: {}", r.body);
        assert_eq!(r.body["upload"]["media_type"], "text/plain");
        let link = r.body["download_url"].as_str().unwrap();
        let d = h.call(&owner, "GET", link, None).await;
        assert_eq!(d.status, StatusCode::OK);
        assert_eq!(d.headers["content-type"], "text/plain");
        assert_eq!(d.headers["x-content-type-options"], "nosniff");
        let cd = d.headers["content-disposition"].to_str().unwrap();
        assert!(cd.starts_with("attachment;"), "{cd}");
        assert_eq!(d.bytes, body);
    }
}

#[tokio::test]

async fn an_upload_name_that_is_not_utf8_is_refused_not_mangled() {
    let (h, owner, _) = setup().await;
    for name in ["%C0%AE%C0%AE", "a%FF.txt"] {
        let r = upload(&h, &owner, name, "text/plain", b"x").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{name}: {}", r.body);
    }
}

#[tokio::test]
async fn download_links_die_with_membership_and_cannot_be_moved() {
    let (h, owner, _) = setup().await;
    let dev = h.member(&owner, "dev", "developer").await;
    let eve = h.member(&owner, "eve", "developer").await;
    let dev_key = Cred::Key(h.api_key(&dev, json!({"name": "d"})).await.0);
    let u = upload(&h, &dev, "a.txt", "text/plain", b"secret a").await;
    let link = u.body["download_url"].as_str().unwrap().to_string();
    let id = u.body["upload"]["id"].as_str().unwrap().to_string();
    assert_eq!(h.call(&dev, "GET", &link, None).await.bytes, b"secret a");
    let r = h.call(&dev_key, "GET", &link, None).await;
    assert_eq!(r.status, StatusCode::OK);
    // HEAD and Range: no body, no partial content trickery, no 5xx.
    let r = h.send(request(&dev, "HEAD", &link, None, None)).await;
    assert_eq!((r.status, r.bytes.len()), (StatusCode::OK, 0));
    let b = request_builder(&dev, "GET", &link, None).header("range", "bytes=2-3");
    let r = h.send(b.body(Body::empty()).unwrap()).await;
    assert_eq!((r.status, &r.bytes[..]), (StatusCode::OK, &b"secret a"[..]));
    // Eve moves to a workspace of her own: her valid signature for her own
    // upload does not open dev's upload, in any workspace.
    let eve_ws = h.create_workspace(&eve, "eve's").await;
    h.call(&owner, "DELETE", "/v1/members/eve", None).await;
    let p = "/v1/uploads?name=e.txt";
    let b = request_builder(&eve, "POST", p, Some(&eve_ws)).header("content-type", "text/plain");
    let e = h.send(b.body(Body::from("eve")).unwrap()).await;
    assert_eq!(e.status, StatusCode::CREATED, "{}", e.body);
    let eve_link = e.body["download_url"].as_str().unwrap().to_string();
    let got = h.call_ws(&eve, "GET", &eve_link, None, Some(&eve_ws)).await;
    assert_eq!(got.bytes, b"eve");
    let (_, eq) = eve_link.split_once('?').unwrap();
    let p = format!("/v1/uploads/{id}");
    let q = format!("{p}/content?{eq}");
    for (ws, p) in [(None, &p), (None, &q), (Some(WS), &q)] {
        let r = h.call_ws(&eve, "GET", p, None, ws).await;
        assert!(r.status.is_client_error() && r.bytes != b"secret a", "{p}");
    }
    // Dev removed: the link, by session and by key, is dead at once.
    h.call(&owner, "DELETE", "/v1/members/dev", None).await;
    for (c, ws) in [(&dev, None), (&dev, Some(WS)), (&dev_key, None)] {
        let r = h.call_ws(c, "GET", &link, None, ws).await;
        assert!(r.status.is_client_error() && r.bytes != b"secret a");
    }
}

type Hdrs = Vec<(String, String)>;

/// Standard Webhooks headers, names in odd case.
fn sign_std(secret: &str, id: &str, ts: &str, body: &[u8]) -> Hdrs {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    m.update(format!("{id}.{ts}.").as_bytes());
    m.update(body);
    let sig = format!("v1,{}", b64.encode(m.finalize().into_bytes()));
    let names = ["Webhook-Id", "WEBHOOK-TIMESTAMP", "webhook-Signature"];
    let h = |i: usize, v: &str| (names[i].to_string(), v.to_string());
    vec![h(0, id), h(1, ts), h(2, &sig)]
}

async fn deliver(h: &Harness, path: &str, hdrs: &Hdrs, body: &[u8]) -> Resp {
    let mut b = Request::builder().method("POST").uri(path);
    for (k, v) in hdrs {
        b = b.header(k.as_str(), v.as_str());
    }
    h.send(b.body(Body::from(body.to_vec())).unwrap()).await
}

async fn rotate(h: &Harness, who: &Cred, worker: &str) -> String {
    let p = format!("/v1/workers/{worker}/webhook/secret");
    let r = h.call(who, "POST", &p, None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["secret"].as_str().unwrap().to_string()
}

/// A response without its request id (body and headers).
fn fingerprint(r: &Resp) -> (u16, Value, Vec<(String, String)>) {
    let mut body = r.body.clone();
    body["error"]["request_id"] = Value::Null;
    let mut hs: Vec<_> = (r.headers.iter())
        .filter(|(k, _)| *k != "x-request-id")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    hs.sort();
    (r.status.as_u16(), body, hs)
}

#[tokio::test]
async fn webhook_headers_timestamps_paths_sizes_and_rotation() {
    let (h, owner, _) = setup().await;
    let secret = rotate(&h, &owner, "std-hook").await;
    let ts = (T0 / 1000).to_string();
    let path = format!("/v1/hooks/{WS}/std-hook");
    let body = b"{}";
    let store = h.store();
    let runs = || async { store.list_runs(WS, None, 99, None).await.unwrap().len() };
    // Positive control: mixed-case header names verify.
    let ok = deliver(&h, &path, &sign_std(&secret, "msg_ok", &ts, body), body).await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.body);
    let base = runs().await;
    let mut refused = Vec::new();
    // Each header duplicated, every copy valid.
    for i in 0..3 {
        let mut hs = sign_std(&secret, &format!("msg_dup{i}"), &ts, body);
        hs.push((hs[i].0.to_lowercase(), hs[i].1.clone()));
        refused.push(deliver(&h, &path, &hs, body).await);
    }
    // Timestamps: float, negative, signed, huge, exponent, spaced; correctly signed.
    let huge = "9".repeat(15);
    let (float, plus, spaced) = (format!("{ts}.0"), format!("+{ts}"), format!("{ts} 1"));
    for (i, t) in [&float, "-1", &plus, &huge, "1.8e9", &spaced]
        .iter()
        .enumerate()
    {
        let hs = sign_std(&secret, &format!("msg_t{i}"), t, body);
        refused.push(deliver(&h, &path, &hs, body).await);
    }
    // Encoded traversal in either path segment, signed for the real endpoint.
    let tricks = "..%2FWS/std-hook WS/..%2Fstd-hook WS%2Fx/std-hook %2e%2e/std-hook \
                  WS/std-hook%2F..%2Fstd-hook WS/STD-HOOK WS/std-hook%00 WS%00/std-hook";
    for (i, t) in tricks.split(' ').enumerate() {
        let hs = sign_std(&secret, &format!("msg_p{i}"), &ts, body);
        let p = format!("/v1/hooks/{}", t.replace("WS", WS));
        refused.push(deliver(&h, &p, &hs, body).await);
    }
    // Another format's headers, a bad signature, a replay.
    let gh = vec![("x-hub-signature-256".into(), "sha256=00".into())];
    refused.push(deliver(&h, &path, &gh, body).await);
    let wrong = sign_std("whsec_AAAAAAAAAAAAAAAAAAAAAA==", "m", &ts, body);
    refused.push(deliver(&h, &path, &wrong, body).await);
    refused.push(deliver(&h, &path, &sign_std(&secret, "msg_ok", &ts, body), body).await);
    // All byte-identical apart from the request id.
    let first = fingerprint(&refused[0]);
    for r in &refused {
        assert_shape(r, StatusCode::UNAUTHORIZED, "hook");
        assert_eq!(fingerprint(r), first);
    }
    let r = deliver(&h, &format!("/v1/hooks/../{WS}/std-hook"), &vec![], body).await;
    assert_shape(&r, StatusCode::NOT_FOUND, "extra segment");
    // Over 1 MiB with a valid signature: 413, nothing created.
    let big = format!("{{\"a\":\"{}\"}}", "x".repeat(1 << 20));
    let hs = sign_std(&secret, "msg_big", &ts, big.as_bytes());
    let r = deliver(&h, &path, &hs, big.as_bytes()).await;
    assert_shape(&r, StatusCode::PAYLOAD_TOO_LARGE, "413");
    assert_eq!(runs().await, base, "a refused delivery created a run");
    // Across a rotation: the old delivery stays used, whichever secret signs it.
    let new = rotate(&h, &owner, "std-hook").await;
    for s in [&secret, &new] {
        let r = deliver(&h, &path, &sign_std(s, "msg_ok", &ts, body), body).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    // Positive control: new ids verify under both during the grace period.
    for (s, id) in [(&secret, "msg_2"), (&new, "msg_3")] {
        let r = deliver(&h, &path, &sign_std(s, id, &ts, body), body).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    }
}

#[tokio::test]

async fn a_captured_github_delivery_cannot_be_replayed_under_a_new_delivery_id() {
    let (h, owner, _) = setup().await;
    let secret = rotate(&h, &owner, "gh-hook").await;
    let body = b"{}";
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body);
    let sig: String = (m.finalize().into_bytes().iter())
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = format!("/v1/hooks/{WS}/gh-hook");
    let hs = |id: &str| {
        let s = ("x-hub-signature-256".to_string(), format!("sha256={sig}"));
        vec![s, ("x-github-delivery".to_string(), id.to_string())]
    };
    let r = deliver(&h, &path, &hs("d-1"), body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "positive control");
    let r = deliver(&h, &path, &hs("d-1"), body).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "same id");
    let r = deliver(&h, &path, &hs("d-attacker"), body).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "fresh id: {}", r.body);
}

#[tokio::test]
async fn metrics_are_for_admins_of_the_workers_workspace_only() {
    let (h, owner, _) = setup().await;
    let admin = h.member(&owner, "adm", "admin").await;
    let dev = h.member(&owner, "dev", "developer").await;
    let dev_ws = h.create_workspace(&dev, "devs").await;
    let body = json!({"name": "s", "scopes": ["runs.read"]});
    let scoped = Cred::Key(h.api_key(&owner, body).await.0);
    for c in [&admin, &owner] {
        let r = h.call_ws(c, "GET", "/metrics", None, Some(WS)).await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let dws = Some(dev_ws.as_str());
    let cases = [
        (&dev, Some(WS), 403),
        (&dev, dws, 404),
        (&admin, dws, 404),
        (&scoped, None, 403),
        (&Cred::None, None, 401),
    ];
    for (c, ws, want) in cases {
        let r = h.call_ws(c, "GET", "/metrics", None, ws).await;
        let want = StatusCode::from_u16(want).unwrap();
        assert_shape(&r, want, &format!("metrics {ws:?}"));
        assert!(!r.text.contains("airlock_"));
    }
}

#[tokio::test]
async fn router_level_rejections_have_the_error_shape_and_headers() {
    let (h, _, key) = setup().await;
    let huge = format!("{{\"value\":\"{}\"}}", "a".repeat(2 << 20));
    let (json, n) = (Some("application/json"), Body::empty);
    let rot = "/v1/workers/std-hook/webhook/secret";
    let up = "/v1/uploads?name=a.txt&x=1";
    let hook = format!("/v1/hooks/{WS}/std-hook");
    let cases = [
        (raw(&key, "PATCH", "/v1/runs", None, n()), 405),
        (raw(&Cred::None, "GET", &hook, None, n()), 405),
        (raw(&key, "DELETE", "/healthz", None, n()), 405),
        (raw(&key, "PUT", "/v1/secrets/X", json, huge.clone()), 413),
        (raw(&key, "POST", rot, None, huge.clone()), 413),
        (raw(&key, "PUT", "/v1/secrets/X", Some("a/b"), "{}"), 415),
        (raw(&key, "PUT", "/v1/secrets/X", None, "{}"), 415),
        (raw(&key, "GET", "/v1/runs/%FF%FE", None, n()), 400),
        (raw(&key, "GET", "/v1/nope", None, n()), 404),
        (raw(&key, "POST", up, Some("text/plain"), "a"), 400),
    ];
    for (req, want) in cases {
        let what = format!("{} {}", req.method(), req.uri());
        let r = h.send(req).await;
        assert_shape(&r, StatusCode::from_u16(want).unwrap(), &what);
        let text = r.text.to_lowercase();
        for leak in ["axum", "serde", "sqlx", "/work/", "panicked"] {
            assert!(!text.contains(leak), "{what} leaks {leak}: {text}");
        }
    }
    // Positive control: the same route answers when asked properly.
    let b = json!({"value": "v"});
    let r = h.call(&key, "PUT", "/v1/secrets/X", Some(b)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}
