//! Signed webhook triggers over the real router (API-9, RUN-6): secrets are
//! rotated over HTTP and shown once, deliveries signed the way each sender
//! signs them start exactly one run, and everything else — a bad, stale or
//! replayed signature, an unknown endpoint — gets the same 401 and creates
//! nothing. The Standard Webhooks cases are signed by the official Python
//! package `standardwebhooks` (installed into `target/pydeps-sw` by
//! `scripts/test`; set `AIRLOCK_TEST_SKIP_STANDARDWEBHOOKS=1` to skip those
//! cases).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use airlock_service::{webhook_secret_name as secret_name, webhook_vault_space as vault_space};
use airlock_store::{DEFAULT_WORKSPACE, RunRecord};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use common::{Cred, ECHO, Harness, PW, Resp, T0};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const WS: &str = DEFAULT_WORKSPACE;

/// A worker's manifest: `id`, the `[[triggers]]` block, two optional inputs.
fn manifest(id: &str, triggers: &str) -> String {
    format!(
        "[worker]\nid = \"{id}\"\ntitle = \"{id}\"\nkind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\n\
         [inputs.name]\ntype = \"string\"\nrequired = false\n\n\
         [inputs.count]\ntype = \"number\"\nrequired = false\n\n{triggers}"
    )
}

/// Webhook workers in each format, and one without a webhook trigger.
async fn harness() -> Harness {
    let workers = [
        ("std-hook", "[[triggers]]\nkind = \"webhook\"\n"),
        (
            "std-explicit",
            "[[triggers]]\nkind = \"webhook\"\nformat = \"standard\"\n",
        ),
        (
            "gh-hook",
            "[[triggers]]\nkind = \"webhook\"\nformat = \"github\"\n",
        ),
        (
            "slack-hook",
            "[[triggers]]\nkind = \"webhook\"\nformat = \"slack\"\n",
        ),
        (
            "stripe-hook",
            "[[triggers]]\nkind = \"webhook\"\nformat = \"stripe\"\n",
        ),
        ("manual-only", ""),
    ];
    let mut b = Harness::builder();
    for (id, triggers) in workers {
        b = b.worker(id, &manifest(id, triggers), ECHO);
    }
    b.build().await
}

impl Harness {
    fn now_s(&self) -> i64 {
        use airlock_iam::Clock;
        self.clock.now_ms() / 1000
    }

    /// Rotates a worker's secret over HTTP; returns `(secret, version)`.
    async fn rotate(&self, who: &Cred, worker: &str, body: Option<Value>) -> (String, i64) {
        let r = self.rotate_resp(who, worker, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(r.body["endpoint"], format!("/v1/hooks/{WS}/{worker}"));
        (
            r.body["secret"].as_str().unwrap().to_string(),
            r.body["version"].as_i64().unwrap(),
        )
    }

    async fn rotate_resp(&self, who: &Cred, worker: &str, body: Option<Value>) -> Resp {
        self.call(
            who,
            "POST",
            &format!("/v1/workers/{worker}/webhook/secret"),
            body,
        )
        .await
    }

    /// Posts a delivery: raw body bytes and the given headers, nothing else.
    async fn deliver(&self, path: &str, headers: &[(String, String)], body: &[u8]) -> Resp {
        let mut b = Request::builder()
            .method("POST")
            .uri(path)
            .header("content-type", "application/json");
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        self.send(b.body(Body::from(body.to_vec())).unwrap()).await
    }

    async fn hook(&self, worker: &str, headers: &[(String, String)], body: &[u8]) -> Resp {
        self.deliver(&format!("/v1/hooks/{WS}/{worker}"), headers, body)
            .await
    }

    async fn runs(&self) -> Vec<RunRecord> {
        self.store().list_runs(WS, None, 500, None).await.unwrap()
    }

    /// The refusal codes audited so far, in order, from every chain.
    async fn refusals(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ws in [WS, "ws_system"] {
            for line in self.store().audit_lines(ws).await.unwrap() {
                let v: Value = serde_json::from_str(&line).unwrap();
                if v["event_type"] == "webhook.refused" {
                    out.push(v["metadata"]["code"].as_str().unwrap().to_string());
                }
            }
        }
        out
    }

    async fn audit_text(&self) -> String {
        let mut all = self.store().audit_lines(WS).await.unwrap();
        all.extend(self.store().audit_lines("ws_system").await.unwrap());
        all.join("\n")
    }
}

/// The one refusal every failed delivery gets.
fn assert_refused(r: &Resp) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let e = &r.body["error"];
    assert_eq!(e["code"], "unauthenticated", "{}", r.body);
    assert_eq!(e["message"], "signature verification failed", "{}", r.body);
    let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "message", "request_id"], "no detail");
}

fn accepted(r: &Resp) -> String {
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    assert_eq!(r.body["run"]["state"], "queued");
    r.body["run"]["id"].as_str().unwrap().to_string()
}

/// Request headers as sent: `(name, value)`.
type Headers = Vec<(String, String)>;

fn h(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ------------------------------------------------------------ signers

/// Standard Webhooks headers signed in Rust (for the non-interop cases).
fn standard(secret: &str, id: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    m.update(format!("{id}.{ts}.").as_bytes());
    m.update(body);
    let sig = b64.encode(m.finalize().into_bytes());
    vec![
        h("webhook-id", id),
        h("webhook-timestamp", ts.to_string()),
        h("webhook-signature", format!("v1,{sig}")),
    ]
}

fn github(secret: &str, delivery: &str, body: &[u8]) -> Vec<(String, String)> {
    vec![
        h(
            "x-hub-signature-256",
            format!("sha256={}", hmac_hex(secret.as_bytes(), &[body])),
        ),
        h("x-github-delivery", delivery),
        h("x-github-event", "push"),
    ]
}

fn slack(secret: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let sig = hmac_hex(secret.as_bytes(), &[format!("v0:{ts}:").as_bytes(), body]);
    vec![
        h("x-slack-request-timestamp", ts.to_string()),
        h("x-slack-signature", format!("v0={sig}")),
    ]
}

fn stripe(secrets: &[&str], ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let mut v = format!("t={ts}");
    for s in secrets {
        let sig = hmac_hex(s.as_bytes(), &[format!("{ts}.").as_bytes(), body]);
        v.push_str(&format!(",v1={sig}"));
    }
    vec![h("stripe-signature", v)]
}

/// Where the official Python package is installed for the tests.
fn pydeps() -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap();
    root.join("target/pydeps-sw")
}

/// Standard Webhooks headers signed by the official Python package.
/// `None` when the package is unavailable and the caller may skip.
fn official(secret: &str, id: &str, ts: i64, body: &str) -> Option<Vec<(String, String)>> {
    const SCRIPT: &str = "import sys\n\
from datetime import datetime, timezone\n\
from standardwebhooks.webhooks import Webhook\n\
secret, msg_id, ts, body = sys.argv[1:5]\n\
print(Webhook(secret).sign(msg_id, datetime.fromtimestamp(int(ts), tz=timezone.utc), body))\n";
    let mut pythonpath = std::env::var_os("PYTHONPATH").unwrap_or_default();
    if pydeps().is_dir() {
        let mut p = pydeps().into_os_string();
        if !pythonpath.is_empty() {
            p.push(":");
            p.push(&pythonpath);
        }
        pythonpath = p;
    }
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .args([secret, id, &ts.to_string(), body])
        .env("PYTHONPATH", pythonpath)
        .output();
    let failure = match &out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).into_owned()),
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = failure {
        assert!(
            std::env::var_os("AIRLOCK_TEST_SKIP_STANDARDWEBHOOKS").is_some(),
            "the official Standard Webhooks package could not sign: {why}\n\
             run scripts/test (it installs the package into {}), \
             or set AIRLOCK_TEST_SKIP_STANDARDWEBHOOKS=1 to skip these cases",
            pydeps().display()
        );
        eprintln!("skipping: standardwebhooks unavailable ({why})");
        return None;
    }
    let sig = String::from_utf8(out.unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    assert!(sig.starts_with("v1,"), "{sig}");
    Some(vec![
        h("webhook-id", id),
        h("webhook-timestamp", ts.to_string()),
        h("webhook-signature", sig),
    ])
}

// ------------------------------------------------------------ tests

#[tokio::test]
async fn api_9_standard_webhooks_signed_by_the_official_library_start_one_run() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, version) = x.rotate(&owner, "std-hook", None).await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(version, 1);
    let body = r#"{"name": "ada", "count": 3}"#;
    let now = x.now_s();
    let Some(headers) = official(&secret, "msg_2Lh9", now, body) else {
        return;
    };
    let run_id = accepted(&x.hook("std-hook", &headers, body.as_bytes()).await);
    let runs = x.runs().await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.id, run_id);
    assert_eq!(run.worker_id, "std-hook");
    assert_eq!(run.trigger, "webhook");
    assert_eq!(run.actor, "webhook:std-hook");
    assert_eq!(run.input, json!({"name": "ada", "count": 3}));
    assert_eq!(
        x.store()
            .delivery_run(WS, "std-hook", "msg_2Lh9")
            .await
            .unwrap(),
        Some(Some(run_id))
    );
    // The same library at the edges of the window: 299 s either way passes,
    // 301 s either way is refused.
    for (i, skew) in [-299_i64, 299].into_iter().enumerate() {
        let id = format!("msg_skew_ok_{i}");
        let hs = official(&secret, &id, now + skew, body).unwrap();
        accepted(&x.hook("std-hook", &hs, body.as_bytes()).await);
    }
    for (i, skew) in [-301_i64, 301].into_iter().enumerate() {
        let id = format!("msg_skew_bad_{i}");
        let hs = official(&secret, &id, now + skew, body).unwrap();
        assert_refused(&x.hook("std-hook", &hs, body.as_bytes()).await);
    }
    // Signed by the library with another secret.
    let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let hs = official(other, "msg_other", now, body).unwrap();
    assert_refused(&x.hook("std-hook", &hs, body.as_bytes()).await);
    // The library's signature over the body, re-serialised before sending.
    let hs = official(&secret, "msg_respaced", now, body).unwrap();
    assert_refused(
        &x.hook("std-hook", &hs, br#"{"name":"ada","count":3}"#)
            .await,
    );
    assert_eq!(x.runs().await.len(), 3);
    assert_eq!(
        x.refusals().await,
        [
            "timestamp_too_old",
            "timestamp_too_new",
            "signature_mismatch",
            "signature_mismatch"
        ]
    );
}

#[tokio::test]
async fn api_9_standard_format_is_the_default_and_explicit_standard_is_the_same() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, _) = x.rotate(&owner, "std-explicit", None).await;
    let body = br#"{"count": 1}"#;
    let now = x.now_s();
    let Some(hs) = official(&secret, "msg_explicit", now, r#"{"count": 1}"#) else {
        return;
    };
    accepted(&x.hook("std-explicit", &hs, body).await);
    // Rust-side signing agrees with the library.
    accepted(
        &x.hook(
            "std-explicit",
            &standard(&secret, "msg_rust", now, body),
            body,
        )
        .await,
    );
}

#[tokio::test]
async fn api_9_a_replayed_delivery_is_refused_and_not_run_again() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (std_secret, _) = x.rotate(&owner, "std-hook", None).await;
    let (gh_secret, _) = x.rotate(&owner, "gh-hook", None).await;
    let (slack_secret, _) = x.rotate(&owner, "slack-hook", None).await;
    let (stripe_secret, _) = x.rotate(&owner, "stripe-hook", None).await;
    let body = br#"{"name":"ada"}"#;
    let now = x.now_s();
    let cases = [
        ("std-hook", standard(&std_secret, "msg_once", now, body)),
        ("gh-hook", github(&gh_secret, "delivery-1", body)),
        ("slack-hook", slack(&slack_secret, now, body)),
        ("stripe-hook", stripe(&[&stripe_secret], now, body)),
    ];
    for (worker, hs) in &cases {
        accepted(&x.hook(worker, hs, body).await);
        // Within the window, byte for byte the same delivery.
        assert_refused(&x.hook(worker, hs, body).await);
        x.clock.advance(Duration::from_secs(10));
        assert_refused(&x.hook(worker, hs, body).await);
    }
    assert_eq!(x.runs().await.len(), 4, "one run per delivery");
    assert_eq!(x.refusals().await, ["replayed"; 8]);
    // The audit names the replayed delivery (it was verified).
    assert!(x.audit_text().await.contains(r#""delivery":"msg_once""#));
    // Two copies racing each other: one run.
    let hs = standard(&std_secret, "msg_race", x.now_s(), body);
    let (a, b) = tokio::join!(x.hook("std-hook", &hs, body), x.hook("std-hook", &hs, body));
    let statuses = [a.status, b.status];
    assert!(statuses.contains(&StatusCode::ACCEPTED), "{statuses:?}");
    assert!(statuses.contains(&StatusCode::UNAUTHORIZED), "{statuses:?}");
    assert_eq!(x.runs().await.len(), 5);
    // Stripe: reordering or dropping signatures of a captured delivery does
    // not make it new.
    let (stripe2, _) = x.rotate(&owner, "stripe-hook", None).await;
    let now = x.now_s();
    let hs = stripe(&[&stripe2, &stripe_secret], now, body);
    accepted(&x.hook("stripe-hook", &hs, body).await);
    for variant in [
        stripe(&[&stripe_secret, &stripe2], now, body),
        stripe(&[&stripe_secret], now, body),
    ] {
        assert_refused(&x.hook("stripe-hook", &variant, body).await);
    }
    assert_eq!(x.runs().await.len(), 6);
}

#[tokio::test]
async fn api_9_a_bad_signature_gets_401_and_creates_nothing() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (std_secret, _) = x.rotate(&owner, "std-hook", None).await;
    let (gh_secret, _) = x.rotate(&owner, "gh-hook", None).await;
    let (slack_secret, _) = x.rotate(&owner, "slack-hook", None).await;
    let (stripe_secret, _) = x.rotate(&owner, "stripe-hook", None).await;
    let body = br#"{"name":"ada"}"#;
    let tampered = br#"{"name":"eve"}"#;
    let now = x.now_s();
    let wrong_std = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let cases: Vec<(&str, Headers, &[u8])> = vec![
        // Wrong secret.
        ("std-hook", standard(wrong_std, "m1", now, body), body),
        ("gh-hook", github("not-the-secret", "d1", body), body),
        ("slack-hook", slack("not-the-secret", now, body), body),
        ("stripe-hook", stripe(&["not-the-secret"], now, body), body),
        // Right secret, tampered body.
        ("std-hook", standard(&std_secret, "m2", now, body), tampered),
        ("gh-hook", github(&gh_secret, "d2", body), tampered),
        ("slack-hook", slack(&slack_secret, now, body), tampered),
        (
            "stripe-hook",
            stripe(&[&stripe_secret], now, body),
            tampered,
        ),
        // Out of the window.
        (
            "std-hook",
            standard(&std_secret, "m3", now - 301, body),
            body,
        ),
        ("slack-hook", slack(&slack_secret, now + 301, body), body),
        (
            "stripe-hook",
            stripe(&[&stripe_secret], now - 3600, body),
            body,
        ),
        // No signature headers at all, and garbage.
        ("std-hook", vec![], body),
        ("gh-hook", vec![], body),
        ("slack-hook", vec![], body),
        ("stripe-hook", vec![], body),
        (
            "std-hook",
            vec![
                h("webhook-id", "m4"),
                h("webhook-timestamp", "soon"),
                h("webhook-signature", "v1,AAAA"),
            ],
            body,
        ),
        (
            "gh-hook",
            vec![
                h("x-hub-signature-256", "sha256=not-hex"),
                h("x-github-delivery", "d3"),
            ],
            body,
        ),
        // Another worker's valid signature.
        ("gh-hook", standard(&std_secret, "m5", now, body), body),
    ];
    for (worker, hs, b) in &cases {
        assert_refused(&x.hook(worker, hs, b).await);
    }
    assert!(x.runs().await.is_empty(), "a refusal creates nothing");
    // Every refusal was audited with its reason; no secret was.
    let codes = x.refusals().await;
    assert_eq!(codes.len(), cases.len(), "{codes:?}");
    for code in [
        "signature_mismatch",
        "timestamp_too_old",
        "timestamp_too_new",
        "missing_header",
        "malformed_header",
    ] {
        assert!(codes.iter().any(|c| c == code), "{code} in {codes:?}");
    }
    let audit = x.audit_text().await;
    for s in [&std_secret, &gh_secret, &slack_secret, &stripe_secret] {
        assert!(
            !audit.contains(s.as_str()),
            "a secret reached the audit trail"
        );
    }
    // Positive control: the same requests, correctly signed, pass.
    accepted(
        &x.hook("std-hook", &standard(&std_secret, "m-ok", now, body), body)
            .await,
    );
    accepted(
        &x.hook("gh-hook", &github(&gh_secret, "d-ok", body), body)
            .await,
    );
    assert_eq!(x.runs().await.len(), 2);
}

#[tokio::test]
async fn api_9_unknown_endpoints_answer_exactly_like_bad_signatures() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, _) = x.rotate(&owner, "std-hook", None).await;
    let body = br#"{"name":"ada"}"#;
    let now = x.now_s();
    let hs = standard(&secret, "m1", now, body);
    let paths = [
        // A bad signature at a real endpoint, for comparison.
        format!("/v1/hooks/{WS}/gh-hook"),
        // No such worker.
        format!("/v1/hooks/{WS}/nope"),
        // A worker without a webhook trigger.
        format!("/v1/hooks/{WS}/manual-only"),
        // A webhook worker (same format) that has no secret yet.
        format!("/v1/hooks/{WS}/std-explicit"),
        // The right worker in another (or no) workspace.
        "/v1/hooks/ws_other/std-hook".to_string(),
        "/v1/hooks/ws_nowhere/std-hook".to_string(),
    ];
    let mut answers = Vec::new();
    for p in &paths {
        let r = x.deliver(p, &hs, body).await;
        assert_refused(&r);
        let mut e = r.body["error"].clone();
        e.as_object_mut().unwrap().remove("request_id");
        answers.push(e);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert!(x.runs().await.is_empty());
    let codes = x.refusals().await;
    assert_eq!(codes.len(), paths.len(), "{codes:?}");
    assert!(codes.contains(&"unknown_endpoint".to_string()));
    assert!(codes.contains(&"no_secret".to_string()));
    // The positive control.
    accepted(&x.hook("std-hook", &hs, body).await);
}

#[tokio::test]
async fn api_9_rotation_keeps_the_previous_secret_for_a_day_then_retires_it() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let body = br#"{"count":1}"#;
    let (s1, v1) = x.rotate(&owner, "std-hook", None).await;
    assert_eq!(v1, 1);
    let r = x.rotate_resp(&owner, "std-hook", None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let s2 = r.body["secret"].as_str().unwrap().to_string();
    assert_eq!(r.body["version"], 2);
    assert_eq!(r.body["previous_valid_until"], json!(T0 + 24 * 3600 * 1000));
    assert_ne!(s1, s2);
    let now = x.now_s();
    // Both versions verify during the grace period.
    accepted(
        &x.hook("std-hook", &standard(&s1, "a1", now, body), body)
            .await,
    );
    accepted(
        &x.hook("std-hook", &standard(&s2, "a2", now, body), body)
            .await,
    );
    // Both values are in the vault, under the documented names.
    for v in [1, 2] {
        assert!(
            x.store()
                .get_secret(&vault_space(WS), &secret_name("std-hook", v))
                .await
                .unwrap()
                .is_some()
        );
    }
    // One day later (and a second), the old one is refused and retired.
    x.clock.advance(Duration::from_secs(24 * 3600 + 1));
    let now = x.now_s();
    assert_refused(
        &x.hook("std-hook", &standard(&s1, "b1", now, body), body)
            .await,
    );
    accepted(
        &x.hook("std-hook", &standard(&s2, "b2", now, body), body)
            .await,
    );
    assert_eq!(
        x.store()
            .webhook_secret_versions(WS, "std-hook")
            .await
            .unwrap()
            .into_iter()
            .map(|(v, _)| v)
            .collect::<Vec<_>>(),
        [2]
    );
    assert!(
        x.store()
            .get_secret(&vault_space(WS), &secret_name("std-hook", 1))
            .await
            .unwrap()
            .is_none(),
        "a retired secret's value leaves the vault"
    );
    // Two rotations in a row: only the immediately previous secret keeps
    // its grace period.
    let owner = x.login("owner", PW).await;
    let (s3, _) = x.rotate(&owner, "std-hook", None).await;
    let (s4, v4) = x.rotate(&owner, "std-hook", None).await;
    assert_eq!(v4, 4);
    let now = x.now_s();
    assert_refused(
        &x.hook("std-hook", &standard(&s2, "c2", now, body), body)
            .await,
    );
    accepted(
        &x.hook("std-hook", &standard(&s3, "c3", now, body), body)
            .await,
    );
    accepted(
        &x.hook("std-hook", &standard(&s4, "c4", now, body), body)
            .await,
    );
    assert_eq!(x.runs().await.len(), 5);
    let audit = x.audit_text().await;
    assert!(audit.contains("webhook.secret_rotated"));
    assert!(audit.contains("webhook.secret_retired"));
    for s in [&s1, &s2, &s3, &s4] {
        assert!(!audit.contains(s.as_str()));
    }
}

#[tokio::test]
async fn api_9_github_slack_and_stripe_deliveries_start_runs() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (gh, _) = x.rotate(&owner, "gh-hook", None).await;
    let (st, _) = x.rotate(&owner, "stripe-hook", None).await;
    // Slack issues its own signing secret: it is imported.
    let slack_secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let (sl, _) = x
        .rotate(&owner, "slack-hook", Some(json!({"secret": slack_secret})))
        .await;
    assert_eq!(sl, slack_secret);
    for s in [&gh, &st] {
        assert_eq!(s.len(), 64, "plain hex for non-Standard formats");
    }
    let body = br#"{"name":"from-sender","count":2}"#;
    let now = x.now_s();
    accepted(
        &x.hook("gh-hook", &github(&gh, "72d3162e", body), body)
            .await,
    );
    accepted(&x.hook("slack-hook", &slack(&sl, now, body), body).await);
    accepted(
        &x.hook(
            "stripe-hook",
            &stripe(&["whsec_some_old_one", &st], now, body),
            body,
        )
        .await,
    );
    let runs = x.runs().await;
    assert_eq!(runs.len(), 3);
    for r in &runs {
        assert_eq!(r.trigger, "webhook");
        assert_eq!(r.actor, format!("webhook:{}", r.worker_id));
        assert_eq!(r.input, json!({"name": "from-sender", "count": 2}));
    }
    // A malformed import is refused and changes nothing.
    let r = x
        .rotate_resp(&owner, "slack-hook", Some(json!({"secret": "short"})))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    let r = x
        .rotate_resp(&owner, "slack-hook", Some(json!({"value": "x"})))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    accepted(
        &x.hook(
            "slack-hook",
            &slack(&sl, now, br#"{"count":3}"#),
            br#"{"count":3}"#,
        )
        .await,
    );
}

#[tokio::test]
async fn api_9_verified_but_invalid_input_is_422_and_the_delivery_stays_used() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, _) = x.rotate(&owner, "std-hook", None).await;
    let now = x.now_s();
    for (i, body) in [
        &br#"{"undeclared": true}"#[..],
        br#"["not", "an", "object"]"#,
        br#"{"count": "three"}"#,
        b"token=a&team_id=b",
    ]
    .into_iter()
    .enumerate()
    {
        let hs = standard(&secret, &format!("bad-input-{i}"), now, body);
        let r = x.hook("std-hook", &hs, body).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
        // The delivery was used: sending it again is a replay.
        assert_refused(&x.hook("std-hook", &hs, body).await);
    }
    assert!(x.runs().await.is_empty());
}

#[tokio::test]
async fn api_9_bodies_over_1_mib_are_refused_unread() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, _) = x.rotate(&owner, "std-hook", None).await;
    let mut body = br#"{"name":""#.to_vec();
    body.extend(std::iter::repeat_n(b'a', 1 << 20));
    body.extend(br#""}"#);
    let hs = standard(&secret, "big", x.now_s(), &body);
    let r = x.hook("std-hook", &hs, &body).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert!(x.runs().await.is_empty());
}

#[tokio::test]
async fn api_9_rotation_needs_workers_write_a_visible_worker_and_a_webhook_trigger() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    // Unauthenticated.
    let r = x
        .call(
            &Cred::None,
            "POST",
            "/v1/workers/std-hook/webhook/secret",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    // A role without workers.write.
    for role in ["viewer", "human_assistant"] {
        let who = x.member(&owner, &format!("u-{role}"), role).await;
        let r = x.rotate_resp(&who, "std-hook", None).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{role}: {}", r.body);
    }
    // A developer may.
    let dev = x.member(&owner, "dev", "developer").await;
    x.rotate(&dev, "std-hook", None).await;
    // No such worker; a worker without a webhook trigger.
    let r = x.rotate_resp(&owner, "nope", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = x.rotate_resp(&owner, "manual-only", None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "no_webhook_trigger");
    // Another workspace does not see this workspace's workers.
    let other = x.create_workspace(&owner, "other").await;
    let r = x
        .call_ws(
            &owner,
            "POST",
            "/v1/workers/std-hook/webhook/secret",
            None,
            Some(&other),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(
        x.store()
            .webhook_secret_versions(&other, "std-hook")
            .await
            .unwrap()
            .is_empty()
    );
    // Nothing was rotated by the refused calls.
    assert_eq!(
        x.store()
            .webhook_secret_versions(WS, "std-hook")
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn api_9_the_secret_is_shown_once_and_never_listed() {
    let x = harness().await;
    let owner = x.bootstrap_owner().await;
    let (secret, version) = x.rotate(&owner, "gh-hook", None).await;
    let r = x.call(&owner, "GET", "/v1/secrets", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let text = r.body.to_string();
    // The signing keys live apart from the workspace's own secrets, so a
    // worker cannot declare one and have it delivered.
    assert!(!text.contains(&secret_name("gh-hook", version)), "{text}");
    assert!(!text.contains(&secret), "a listing never shows a value");
    assert!(
        x.store()
            .get_secret(&vault_space(WS), &secret_name("gh-hook", version))
            .await
            .unwrap()
            .is_some()
    );
    assert!(!x.audit_text().await.contains(&secret));
}

/// API-4 (claim 86): webhook runs count against the workspace's daily run
/// quota like any other run; a delivery refused for quota creates nothing
/// and its id stays unused, so the sender can retry it tomorrow.
#[tokio::test]
async fn api_4_webhook_runs_count_against_the_workspace_quota() {
    let limits = common::LimitConfig {
        runs_per_workspace_per_day: 2,
        ..common::LimitConfig::unlimited()
    };
    let x = Harness::builder()
        .limits(limits)
        .worker(
            "std-hook",
            &manifest("std-hook", "[[triggers]]\nkind = \"webhook\"\n"),
            ECHO,
        )
        .worker("manual-only", &manifest("manual-only", ""), ECHO)
        .build()
        .await;
    let owner = x.bootstrap_owner().await;
    let (secret, _) = x.rotate(&owner, "std-hook", None).await;
    let body = br#"{"name":"ada"}"#;
    // One unit spent by hand, one by a delivery: both succeed (control).
    let r = x
        .call(
            &owner,
            "POST",
            "/v1/workers/manual-only/runs",
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    accepted(
        &x.hook("std-hook", &standard(&secret, "q1", x.now_s(), body), body)
            .await,
    );
    // The quota is spent: the next delivery gets 429 and creates nothing.
    let hs = standard(&secret, "q2", x.now_s(), body);
    let r = x.hook("std-hook", &hs, body).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "quota_exceeded");
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(x.runs().await.len(), 2);
    // The next day the same delivery (same id, fresh timestamp) is accepted:
    // the refused one was never recorded as used.
    x.clock.advance(Duration::from_secs(86_400));
    let hs = standard(&secret, "q2", x.now_s(), body);
    accepted(&x.hook("std-hook", &hs, body).await);
    assert_eq!(x.runs().await.len(), 3);
}

/// KEY-5 (claim 94): an endpoint's signing key lives in a vault space no
/// worker can declare. A worker that declares the key's exact vault name
/// reads its own workspace, where no such secret exists: its run is blocked
/// (`secret_missing`) and never sees the key. Control: the endpoint itself
/// verifies deliveries with that key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_5_a_worker_declaring_a_webhook_key_name_never_receives_the_key() {
    let name = secret_name("std-hook", 1);
    let thief = format!(
        "[worker]\nid = \"thief\"\ntitle = \"thief\"\nkind = \"script\"\nentry = \"run.sh\"\n\
         runtime = \"sh\"\n\n[secrets]\nnames = [\"{name}\"]\n"
    );
    let x = Harness::builder()
        .worker(
            "std-hook",
            &manifest("std-hook", "[[triggers]]\nkind = \"webhook\"\n"),
            ECHO,
        )
        .worker(
            "thief",
            &thief,
            "cat /run/secrets/* > /airlock/output/stolen.txt\n",
        )
        .build()
        .await;
    let owner = x.bootstrap_owner().await;
    let (secret, version) = x.rotate(&owner, "std-hook", None).await;
    assert_eq!(version, 1);
    // Control: the key is live and verifies a delivery.
    let body = br#"{"name":"ada"}"#;
    accepted(
        &x.hook("std-hook", &standard(&secret, "k1", x.now_s(), body), body)
            .await,
    );
    // The worker that names it gets nothing.
    let r = x
        .call(&owner, "POST", "/v1/workers/thief/runs", Some(json!({})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["run"]["id"].as_str().unwrap().to_string();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exec = tokio::spawn(x.svc.clone().run_executor(stop_rx));
    let run = loop {
        let run = x.store().get_run(WS, &id).await.unwrap().unwrap();
        if run.state.is_terminal() {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop_tx.send(true);
    let _ = exec.await;
    assert_eq!(run.error_code.as_deref(), Some("secret_missing"), "{run:?}");
    assert!(!run.workload_started);
    let artifacts = x.store().artifacts(WS, &id).await.unwrap();
    assert!(artifacts.is_empty(), "{artifacts:?}");
}
