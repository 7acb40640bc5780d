//! Adversarial tests of the identity and access layer (IAM-1 … IAM-7,
//! API-1 error shape): header and cookie tricks, pending-MFA sessions,
//! throttling, privilege escalation through memberships, cross-workspace
//! ids, capability tokens and hostile input. Each attack has a positive
//! control that shows the same request succeeds when it should. Tests that
//! exposed a real defect were fixed in the same change (account pre-hijacking
//! through invitations, the last-owner race, key scopes on session routes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use airlock_iam::throttle::ThrottleConfig;
use airlock_iam::{Clock, keys, totp};
use airlock_store::BootstrapState;
use axum::body::Body;
use axum::http::{HeaderValue, Request};
use common::{Cred, Db, Harness, PW, Resp, T0, on_both_backends, quiet, send, session_of};
use serde_json::{Value, json};

const RUN: &str = "POST /v1/workers/hello/runs";

/// A request; `mp` is "METHOD /path".
fn req(c: &Cred, mp: &str, body: Option<&Value>, ws: Option<&str>) -> Request<Body> {
    let (m, p) = mp.split_once(' ').unwrap();
    common::request(c, m, p, body, ws)
}

fn is(r: &Resp, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.text);
}

impl Harness {
    async fn go(&self, c: &Cred, mp: &str, b: Option<Value>, ws: Option<&str>) -> Resp {
        self.send(req(c, mp, b.as_ref(), ws)).await
    }

    /// A bodiless request in the default workspace, asserting its status.
    async fn want(&self, c: &Cred, mp: &str, st: u16) -> Resp {
        let r = self.go(c, mp, None, None).await;
        is(&r, st, &format!("{mp} as {c:?}"));
        r
    }

    async fn want_b(&self, c: &Cred, mp: &str, b: Value, st: u16) -> Resp {
        let r = self.go(c, mp, Some(b), None).await;
        is(&r, st, &format!("{mp} as {c:?}"));
        r
    }

    async fn want_in(&self, c: &Cred, mp: &str, ws: &str, st: u16) -> Resp {
        let r = self.go(c, mp, None, Some(ws)).await;
        is(&r, st, &format!("{mp} in {ws:?} as {c:?}"));
        r
    }

    async fn role(&self, c: &Cred, user: &str, role: &str, st: u16) {
        let r = self.put_role(c, user, role).await;
        is(&r, st, &format!("{user} to {role:?} by {c:?}"));
    }

    /// A new key: (the key as a credential, its id).
    async fn key(&self, who: &Cred, body: Value) -> (Cred, String) {
        let (key, id) = self.api_key(who, body).await;
        (Cred::Key(key), id)
    }

    async fn mfa(&self, who: &Cred, body: Value) -> u16 {
        let r = self.go(who, "POST /v1/session/mfa", Some(body), None);
        r.await.status.as_u16()
    }

    async fn session_id(&self, who: &Cred) -> String {
        let r = self.want(who, "GET /v1/session", 200).await;
        r.body["via"]["session"].as_str().unwrap().to_string()
    }
}

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap()
}

/// API-1: a 4xx with `{error:{code,message,request_id}}` and no internals.
fn clean_error(r: &Resp, what: &str) {
    let (st, text) = (r.status.as_u16(), &r.text);
    assert!((400..500).contains(&st), "{what}: {st} {text}");
    for f in ["code", "message", "request_id"] {
        let ok = r.body["error"][f].is_string();
        assert!(ok, "{what}: no error.{f} in {text:?}");
    }
    let lower = text.to_lowercase();
    for leak in ["sqlx", "sqlite", "panicked", "/tmp/", ".rs:", "backtrace"] {
        assert!(!lower.contains(leak), "{what}: leaks {leak:?}: {text}");
    }
}

fn totp_now(h: &Harness, secret: &[u8], offset: i64) -> Value {
    let t = u64::try_from(h.clock.now_ms() / 1000 + offset * 30).unwrap();
    let code = totp::code_at(secret, totp::Algorithm::Sha1, 6, 30, t);
    json!({ "code": code })
}

/// A six-digit code that is none of the codes valid now (±1 step).
fn wrong_code(h: &Harness, secret: &[u8]) -> Value {
    let valid: Vec<Value> = (-1..=1).map(|o| totp_now(h, secret, o)).collect();
    let mut codes = (0..10).map(|i| json!({ "code": format!("00000{i}") }));
    codes.find(|c| !valid.contains(c)).unwrap()
}

async fn enrol_totp(h: &Harness, who: &Cred) -> Vec<u8> {
    let r = h
        .want_b(who, "POST /v1/mfa/totp", json!({"password": PW}), 201)
        .await;
    let secret = r.body["secret"].as_str().unwrap();
    let secret = totp::base32_decode(secret).unwrap();
    let code = totp_now(h, &secret, 0);
    h.want_b(who, "POST /v1/mfa/totp/confirm", code, 200).await;
    secret
}

#[tokio::test]
async fn authorization_header_variants_fail_closed() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let (Cred::Key(k), _) = h.key(&own, json!({"name": "ci"})).await else {
        unreachable!()
    };
    let get = |auth: &[HeaderValue]| {
        let mut b = Request::builder().uri("/v1/runs");
        for a in auth {
            b = b.header("authorization", a);
        }
        h.send(b.body(Body::empty()).unwrap())
    };
    // Positive controls: the documented forms, and surrounding blanks.
    for ok in ["Bearer ", "bearer ", "Bearer  "] {
        is(&get(&[hv(&format!("{ok}{k} "))]).await, 200, ok);
    }
    let pre = ["BEARER ", "Bearer\t", "Bearer:", "Token ", "Bearer ="];
    let mut bad: Vec<String> = pre.iter().map(|p| format!("{p}{k}")).collect();
    bad.extend([format!("Bearer {k}x"), format!("Bearer {k},{k}")]);
    bad.extend([&k[..49], &k.to_uppercase()].map(|t| format!("Bearer {t}")));
    for b in bad {
        let r = get(&[hv(&b)]).await;
        is(&r, 401, &b);
        clean_error(&r, &b);
    }
    let r = get(&[HeaderValue::from_bytes(b"Bearer \xff").unwrap()]).await;
    clean_error(&r, "non-UTF-8 Authorization");
    // Two Authorization headers: a bad first one is not skipped over.
    let two = [hv("Basic Zm9vOmJhcg=="), hv(&format!("Bearer {k}"))];
    is(&get(&two).await, 401, "two Authorization headers");
}

#[tokio::test]
async fn a_cookie_request_cannot_dodge_csrf_or_be_confused_by_cookies() {
    let h = Harness::new().await;
    let (cookie, csrf) = h.bootstrap_owner().await.parts();
    let (_, other_csrf) = h.login("owner", PW).await.parts();
    type Hs<'a> = &'a [&'a str];
    let post = |cookies: Hs, csrfs: Hs, auth: Hs| {
        let uri = "/v1/workers/hello/runs";
        let mut b = Request::builder().method("POST").uri(uri);
        b = b.header("content-type", "application/json");
        let (ck, xs, au) = ("cookie", "x-csrf-token", "authorization");
        for (name, values) in [(ck, cookies), (xs, csrfs), (au, auth)] {
            b = values.iter().fold(b, |b, v| b.header(name, hv(v)));
        }
        h.send(b.body(Body::from("{}")).unwrap())
    };
    is(&post(&[&cookie], &[&csrf], &[]).await, 201, "control");
    let quoted = format!("{}\"", cookie.replacen('=', "=\"", 1));
    let suffixed = cookie.replacen("session", "sessionx", 1);
    let bogus_first = format!("airlock_session=x; {cookie}");
    let padded = format!(" {csrf}");
    // (what, Cookie headers, X-CSRF-Token headers, Authorization)
    let attacks: &[(&str, Hs, Hs, Hs)] = &[
        ("bogus bearer", &[&cookie], &[], &["Bearer x"]),
        ("empty bearer", &[&cookie], &[], &["Bearer "]),
        ("other session's csrf", &[&cookie], &[&other_csrf], &[]),
        ("padded csrf", &[&cookie], &[&padded], &[]),
        ("empty csrf", &[&cookie], &[""], &[]),
        ("csrf twice, bad first", &[&cookie], &["no", &csrf], &[]),
        ("bogus cookie first", &[&bogus_first], &[&csrf], &[]),
        ("quoted cookie", &[&quoted], &[&csrf], &[]),
        ("cookie name suffix", &[&suffixed], &[&csrf], &[]),
    ];
    for (what, cookies, csrfs, auth) in attacks {
        let r = post(cookies, csrfs, auth).await;
        assert!(
            matches!(r.status.as_u16(), 401 | 403),
            "{what}: {}",
            r.status
        );
        clean_error(&r, what);
    }
    let r = post(&["theme=dark", &cookie], &[&csrf], &[]).await;
    is(&r, 201, "two Cookie headers, the real one second");
    // With secure cookies the un-prefixed name is ignored: a cookie tossed
    // from a sibling origin cannot stand in for the __Host- one.
    let mut cfg = quiet();
    cfg.secure_cookies = true;
    let h2 = Harness::builder().auth(cfg).build().await;
    let s2 = h2.bootstrap_owner().await;
    let (c2, csrf) = s2.parts();
    assert!(c2.starts_with("__Host-airlock_session="));
    let cookie = c2.replacen("__Host-", "", 1);
    let tossed = Cred::Session { cookie, csrf };
    h2.want(&tossed, "GET /v1/runs", 401).await;
    h2.want(&s2, "GET /v1/runs", 200).await;
}

#[tokio::test]
async fn the_workspace_header_never_widens_a_session_or_a_key() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let dev = h.member(&own, "dev", "developer").await;
    let side = h.create_workspace(&dev, "side").await;
    // A key minted there acts there only, though dev is in ws_default too.
    let b = Some(json!({"name": "s"}));
    let r = h.go(&dev, "POST /v1/keys", b, Some(&side)).await;
    is(&r, 201, "key in side");
    let key = Cred::Key(r.body["key"].as_str().unwrap().into());
    h.want(&key, "GET /v1/runs", 200).await;
    h.want_in(&key, "GET /v1/runs", &side, 200).await;
    let r = h.want_in(&key, "GET /v1/runs", "ws_default", 404).await;
    clean_error(&r, "key naming another workspace");
    // The owner's session naming dev's private workspace: 404.
    h.want_in(&own, "GET /v1/runs", &side, 404).await;
    // Odd values: empty, padded, other case, internal ids, non-UTF-8.
    let mut odd: Vec<&[u8]> = vec![b"ws_\xff", b"ws_default\t"];
    odd.extend(["", " ws_default", "WS_DEFAULT", "ws_system"].map(str::as_bytes));
    for ws in odd {
        let what = String::from_utf8_lossy(ws);
        let mut r = req(&dev, "GET /v1/runs", None, None);
        let v = HeaderValue::from_bytes(ws).unwrap();
        r.headers_mut().insert("x-airlock-workspace", v);
        let r = h.send(r).await;
        is(&r, 404, &what);
        clean_error(&r, &what);
    }
    h.want_in(&dev, "GET /v1/runs", &side, 200).await;
    h.want_in(&dev, "GET /v1/runs", "ws_default", 200).await;
}

#[tokio::test]
async fn a_pending_mfa_session_is_good_for_nothing_but_the_second_factor() {
    let mut cfg = quiet();
    cfg.idle_timeout = Duration::from_secs(600);
    cfg.account_throttle = ThrottleConfig::per_account();
    let h = Harness::builder().auth(cfg).build().await;
    let own = h.bootstrap_owner().await;
    let secret = enrol_totp(&h, &own).await;
    h.clock.advance(Duration::from_secs(60));
    let r = h.login_resp("owner", PW).await;
    assert_eq!(r.body["mfa_required"], true);
    let pending = session_of(&r);
    let routes: &[(&str, Option<Value>)] = &[
        ("GET /v1/session", None),
        ("GET /v1/sessions", None),
        ("POST /v1/sessions/revoke-all", None),
        ("DELETE /v1/sessions/ses_x", None),
        ("POST /v1/mfa/totp", Some(json!({"password": PW}))),
        ("GET /v1/keys", None),
        ("POST /v1/keys", Some(json!({"name": "k"}))),
        ("POST /v1/workspaces", Some(json!({"name": "w"}))),
        ("PUT /v1/members/eve", Some(json!({"role": "viewer"}))),
        ("GET /v1/runs", None),
        (RUN, Some(json!({}))),
        ("PUT /v1/secrets/X", Some(json!({"value": "v"}))),
    ];
    for (mp, b) in routes {
        let r = h.go(&pending, mp, b.clone(), None).await;
        is(&r, 401, mp);
        assert_eq!(r.body["error"]["code"], "mfa_required", "{mp}");
        let r = h.go(&pending, mp, b.clone(), Some("ws_default")).await;
        is(&r, 401, &format!("{mp} with a workspace header"));
    }
    // An idle pending session dies, and a valid code cannot revive it.
    h.clock.advance(Duration::from_secs(601));
    assert_eq!(h.mfa(&pending, totp_now(&h, &secret, 0)).await, 401);
    // Brute force: five free failures, then 429 with Retry-After, even for
    // the right code; a new pending session does not reset the count.
    let pending = session_of(&h.login_resp("owner", PW).await);
    for i in 0..6 {
        let st = h.mfa(&pending, wrong_code(&h, &secret)).await;
        assert_eq!(st, 401, "failure {i}");
    }
    let pending = session_of(&h.login_resp("owner", PW).await);
    let good = totp_now(&h, &secret, 0);
    let mp = "POST /v1/session/mfa";
    let r = h.want_b(&pending, mp, good.clone(), 429).await;
    assert_eq!(r.headers["retry-after"], "1");
    clean_error(&r, "mfa throttled");
    let rc = json!({"recovery_code": "aaaaa-bbbbb"});
    assert_eq!(h.mfa(&pending, rc).await, 429, "recovery codes too");
    // After the wait one more guess is allowed, and the wait doubles.
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(h.mfa(&pending, wrong_code(&h, &secret)).await, 401);
    let r = h.want_b(&pending, mp, good.clone(), 429).await;
    assert_eq!(r.headers["retry-after"], "2");
    // Positive control: after waiting, the right code works (never locked
    // out for good), rotates the session, and success resets the count.
    h.clock.advance(Duration::from_secs(2));
    let r = h.want_b(&pending, mp, good, 200).await;
    h.want(&session_of(&r), "GET /v1/runs", 200).await;
    h.want(&pending, "GET /v1/runs", 401).await;
    let pending = session_of(&h.login_resp("owner", PW).await);
    assert_eq!(h.mfa(&pending, wrong_code(&h, &secret)).await, 401);
}

#[tokio::test]
async fn memberships_cannot_be_used_to_climb() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let adm = h.member(&own, "ada", "admin").await;
    let dev = h.member(&own, "dev", "developer").await;
    // Self-promotion and touching an owner (any spelling) are refused.
    h.role(&dev, "dev", "admin", 403).await;
    h.role(&adm, "ada", "owner", 403).await;
    h.role(&adm, "OWNER", "viewer", 403).await;
    h.want(&adm, "DELETE /v1/members/Owner", 403).await;
    for role in ["Owner", "owner ", "OWNER", "root", ""] {
        let r = h.put_role(&adm, "dev", role).await;
        is(&r, 400, role);
        clean_error(&r, role);
    }
    // A key narrowed to members.manage cannot grant what it lacks.
    let scopes = json!({"name": "m", "scopes": ["members.manage"]});
    let (narrow, _) = h.key(&own, scopes).await;
    h.role(&narrow, "dev", "viewer", 403).await;
    h.want(&narrow, "DELETE /v1/members/dev", 403).await;
    // Positive control: an admin may grant admin (they hold all of it).
    h.role(&adm, "dev", "admin", 200).await;
    h.role(&adm, "dev", "developer", 200).await;
    // A removed member's live session and key stop at once; re-adding with
    // a lower role does not revive the key.
    let (dkey, _) = h.key(&dev, json!({"name": "ci"})).await;
    h.want_b(&dkey, RUN, json!({}), 201).await;
    h.want(&adm, "DELETE /v1/members/dev", 204).await;
    h.want(&dkey, "GET /v1/runs", 401).await;
    h.want_in(&dev, "GET /v1/runs", "ws_default", 404).await;
    let r = h.want(&dev, "GET /v1/runs", 403).await;
    assert_eq!(r.body["error"]["code"], "no_workspace");
    h.role(&adm, "dev", "viewer", 201).await;
    h.want(&dkey, "GET /v1/runs", 401).await;
    h.want(&dev, "GET /v1/runs", 200).await;
    h.want_b(&dev, RUN, json!({}), 403).await;
    // Another user's key or session by id: the same 404 as a missing one.
    let (_, own_key) = h.key(&own, json!({"name": "o"})).await;
    let own_ses = h.session_id(&own).await;
    let (_, ak) = h.key(&adm, json!({"name": "a"})).await;
    for t in [format!("keys/{own_key}"), format!("sessions/{own_ses}")] {
        let mp = format!("DELETE /v1/{t}");
        let r = h.want(&adm, &mp, 404).await;
        let miss = h.want(&adm, &mp.replace("_", "_x"), 404).await;
        assert_eq!(r.body["error"]["message"], miss.body["error"]["message"]);
    }
    h.want(&own, "GET /v1/runs", 200).await;
    let keys = h.want(&own, "GET /v1/keys", 200).await;
    assert!(keys.body["api_keys"][0]["revoked_at"].is_null());
    assert!(!keys.text.contains(&ak), "a key list is the caller's own");
    // Positive control: revoking one's own key and session works.
    h.want(&adm, &format!("DELETE /v1/keys/{ak}"), 204).await;
    let mine = h.login("ada", PW).await;
    let mp = format!("DELETE /v1/sessions/{}", h.session_id(&mine).await);
    h.want(&adm, &mp, 204).await;
    h.want(&mine, "GET /v1/runs", 401).await;
}

/// IAM-5 / IAM-7: `keys.own` covers "own API keys and sessions", so a key
/// narrowed to `runs.read` must not list or end its user's sessions.
#[tokio::test]
async fn a_scoped_key_cannot_manage_its_users_sessions() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let body = json!({"name": "ro", "scopes": ["runs.read"]});
    let (ro, id) = h.key(&own, body).await;
    // Control: the scope is enforced on the key routes.
    h.want(&ro, "GET /v1/runs", 200).await;
    h.want(&ro, &format!("DELETE /v1/keys/{id}"), 403).await;
    // The session routes: the owner's IPs and user agents, and logout-all.
    h.want(&ro, "GET /v1/sessions", 403).await;
    h.want(&ro, "POST /v1/sessions/revoke-all", 403).await;
    h.want(&own, "GET /v1/runs", 200).await;
}

/// IAM-7 "a workspace keeps at least one owner": the owner count and the
/// change are separate statements, so two owners demoting each other at
/// the same moment can leave a workspace with none. Run on both backends,
/// whose locking differs (SQLite's one writer, PostgreSQL's row locks).
async fn concurrent_demotions_never_leave_a_workspace_ownerless(db: Db) {
    let h = Harness::builder().db(db).build().await;
    let own = h.bootstrap_owner().await;
    let o2 = h.member(&own, "o2", "owner").await;
    let (promote, demote) = (json!({"role": "owner"}), json!({"role": "admin"}));
    for i in 0..20 {
        let ws = h.create_workspace(&own, &format!("w{i}")).await;
        let r = req(&own, "PUT /v1/members/o2", Some(&promote), Some(&ws));
        is(&h.send(r).await, 201, "second owner");
        let a = req(&own, "PUT /v1/members/o2", Some(&demote), Some(&ws));
        let b = req(&o2, "PUT /v1/members/owner", Some(&demote), Some(&ws));
        let a = tokio::spawn(send(h.app.clone(), a));
        let b = tokio::spawn(send(h.app.clone(), b));
        let (a, b) = (a.await.unwrap().status, b.await.unwrap().status);
        let owners = h.store().count_role(&ws, "owner").await.unwrap();
        assert!(owners >= 1, "round {i}: {a} and {b} left {owners} owners");
    }
}
on_both_backends!(
    concurrent_demotions_never_leave_a_workspace_ownerless,
    flavor = "multi_thread",
    worker_threads = 4
);

#[tokio::test]
async fn bootstrap_stays_closed_and_tokens_are_single_use_and_bound() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let store = h.store();
    let t = keys::new_prefixed_token("alb");
    let st = store.bootstrap_begin(&keys::token_hash(&t), T0).await;
    assert_eq!(st.unwrap(), BootstrapState::Closed);
    let b = json!({"token": t, "username": "evil", "password": PW});
    let r = h.want_b(&Cred::None, "POST /v1/bootstrap", b, 403).await;
    clean_error(&r, "bootstrap after completion");
    assert!(store.user_by_name("evil").await.unwrap().is_none());
    // An invitation's setup token works once, for its own user only.
    let r = h.put_role(&own, "newbie", "viewer").await;
    is(&r, 201, "invite");
    let tok = r.body["setup_token"].as_str().unwrap().to_string();
    is(&h.reset_password(&tok, PW).await, 204, "setup");
    let r = h.reset_password(&tok, "another long passphrase").await;
    is(&r, 403, "setup token reuse");
    clean_error(&r, "setup token reuse");
    h.login("newbie", PW).await;
    // Inviting an existing account (any spelling) hands out no token.
    for (name, role) in [("OWNER", "owner"), ("Newbie", "developer")] {
        let r = h.put_role(&own, name, role).await;
        is(&r, 200, name);
        assert!(r.body["setup_token"].is_null(), "{name}: {}", r.text);
    }
    // Look-alikes are refused, not turned into a second account.
    let users = store.count_users().await.unwrap();
    for name in ["оwner", "ｏwner", "owner\u{200b}", "owner ", "-owner", ".."] {
        let enc: String = name.bytes().map(|b| format!("%{b:02X}")).collect();
        let r = h.put_role(&own, &enc, "viewer").await;
        is(&r, 400, name);
        clean_error(&r, name);
        is(&h.login_resp(name, PW).await, 401, name);
    }
    assert_eq!(store.count_users().await.unwrap(), users);
    is(&h.login_resp("OWNER", PW).await, 201, "normalized");
}

/// Any signed-in user can create a workspace and invite an unknown name
/// into it, which creates an instance-wide account whose setup token the
/// inviter holds. When the real administrator later invites that name,
/// the existing (attacker-controlled) account is silently adopted.
async fn an_invitation_from_another_workspace_cannot_pre_hijack_an_account(db: Db) {
    let h = Harness::builder().db(db).build().await;
    let own = h.bootstrap_owner().await;
    let mal = h.member(&own, "mallory", "viewer").await;
    let trap = h.create_workspace(&mal, "trap").await;
    let b = Some(json!({"role": "viewer"}));
    let r = h.go(&mal, "PUT /v1/members/carol", b, Some(&trap)).await;
    if let Some(t) = r.body["setup_token"].as_str() {
        h.reset_password(t, PW).await; // mallory now knows carol's password
    }
    // Later the owner onboards the real carol as an administrator.
    let r = h.put_role(&own, "carol", "admin").await;
    assert!(matches!(r.status.as_u16(), 200 | 201), "{}", r.text);
    // Either the account is not mallory's to use, or it has no power here.
    let as_carol = h.login_resp("carol", PW).await;
    assert!(
        matches!(as_carol.status.as_u16(), 201 | 401),
        "{}",
        as_carol.text
    );
    if as_carol.status == 201 {
        let (c, b) = (session_of(&as_carol), Some(json!({"role": "admin"})));
        let r = h.go(&c, "PUT /v1/members/mallory", b, Some("ws_default"));
        let r = r.await;
        assert!(
            r.status.as_u16() >= 400,
            "mallory promoted herself: {}",
            r.text
        );
    }
}
on_both_backends!(an_invitation_from_another_workspace_cannot_pre_hijack_an_account);

#[tokio::test]
async fn hostile_bodies_get_clean_4xx_answers() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let post = |path: &'static str, ct: Option<&'static str>, body: Vec<u8>| {
        let mut b = Request::builder().method("POST").uri(path);
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        h.send(b.body(Body::from(body)).unwrap())
    };
    let (js, b) = (Some("application/json"), |s: &str| s.as_bytes().to_vec());
    let login = |u: &str, p: &str| b(&format!(r#"{{"username":"{u}","password":"{p}"}}"#));
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let form = Some("application/x-www-form-urlencoded");
    let cases: Vec<(&str, Option<&'static str>, Vec<u8>)> = vec![
        ("over 1 MiB", js, login("owner", &"a".repeat(1 << 21))),
        ("deep nesting", js, b(&format!(r#"{{"username":{deep}}}"#))),
        ("long username", js, login(&"a".repeat(300), "x")),
        ("unknown field", js, b(r#"{"username":"o","a":1}"#)),
        ("wrong types", js, b(r#"{"username":1,"password":["x"]}"#)),
        ("not json", js, b("username=owner&password=x")),
        ("invalid UTF-8", js, b"{\"username\":\"\xff\"}".to_vec()),
        ("duplicate keys", js, b(r#"{"username":"o","username":""}"#)),
        ("no content type", None, login("owner", "x")),
        ("form type", form, b("{}")),
        ("empty strings", js, login("", "")),
        ("NUL in name", js, login(r"owner\u0000", PW)),
        ("empty body", js, Vec::new()),
    ];
    for (what, ct, body) in cases {
        let r = post("/v1/session", ct, body).await;
        clean_error(&r, what);
        assert!(r.headers.get("set-cookie").is_none(), "{what}");
    }
    for path in ["/v1/bootstrap", "/v1/password/reset"] {
        let r = post(path, js, b(r#"{"token":{"$ne":null}}"#)).await;
        clean_error(&r, path);
    }
    let bodies = [json!({"name": "\u{0}"}), json!({"expires_in_s": -1})];
    for b in bodies.into_iter().chain([json!({"scopes": "x"})]) {
        let r = h.go(&own, "POST /v1/keys", Some(b.clone()), None).await;
        clean_error(&r, &b.to_string());
    }
    // Positive control: the server is still healthy and the owner signs in.
    is(&h.login_resp("owner", PW).await, 201, "after the barrage");
    h.want(&own, "GET /v1/runs", 200).await;
}

/// API-1: "one error shape" — also for a wrong method and an undecodable
/// path parameter on an authenticated route.
#[tokio::test]
async fn router_level_rejections_use_the_error_shape() {
    let h = Harness::new().await;
    let own = h.bootstrap_owner().await;
    let r405 = h.want(&own, "PATCH /v1/session", 405).await;
    let r400 = h.want(&own, "DELETE /v1/keys/%FF", 400).await;
    let (a, b) = (&r405.text, &r400.text);
    let shape = |r: &Resp| r.body["error"]["request_id"].is_string();
    assert!(shape(&r405) && shape(&r400), "405: {a:?}; 400: {b:?}");
}
