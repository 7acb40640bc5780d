//! The credential goes to the provider in its header and nowhere else, and
//! comes back in no error, whatever the provider echoes and in whichever
//! encoding.

use airlock_egress::policy::Credential;
use airlock_model::{ModelAuth, ModelClient, NoEvents, WireFormat};
use airlock_modeltest::{Fault, ScriptedServer, Step};
use airlock_redact::Patterns;
use base64::Engine;

use super::common::*;

const KEY: &str = "sk-test/Zq+8Yx=1c2d3e4f5a6b7c8d9e0f";

fn encodings() -> Vec<(&'static str, String)> {
    let pct: String = KEY
        .bytes()
        .map(|b| match b {
            b'/' => "%2F".to_string(),
            b'+' => "%2B".to_string(),
            b'=' => "%3D".to_string(),
            other => (other as char).to_string(),
        })
        .collect();
    vec![
        ("raw", KEY.to_string()),
        (
            "json-escaped",
            KEY.replace('/', "\\/").replace('+', "\\u002b"),
        ),
        ("percent", pct),
        (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(KEY),
        ),
        ("hex", KEY.bytes().map(|b| format!("{b:02x}")).collect()),
    ]
}

/// True when no form of the key is in `text`.
fn clean(text: &str) -> bool {
    let p = Patterns::new([KEY.as_bytes()]);
    p.redact(text.as_bytes()) == text.as_bytes()
}

fn auth() -> ModelAuth {
    ModelAuth::new(
        "authorization",
        &Credential::new(format!("Bearer {KEY}")),
        &Credential::new(KEY),
    )
    .unwrap()
}

#[tokio::test]
async fn agt_2_credential_is_sent_and_never_in_a_returned_error() {
    for format in ALL {
        for (name, form) in encodings() {
            let echo = format!("Incorrect API key provided: {form}. You can find your key at …");
            let steps = || {
                [
                    Step::text("authenticated"),
                    // Rejected, echoing the key (no retry).
                    Step::status(400, "invalid_request_error", &echo),
                    // Failing, echoing the key, until the retries run out.
                    Step::status(500, "api_error", &echo),
                    Step::status(500, "api_error", &echo),
                    Step::status(500, "api_error", &echo),
                    Step::status(500, "api_error", &echo),
                    // Reported inside a stream.
                    Step::text("x").fault(Fault::ErrorEvent {
                        kind: "invalid_request_error".into(),
                        message: echo.clone(),
                    }),
                ]
            };
            let server =
                ScriptedServer::start_with_auth(steps(), "authorization", &format!("Bearer {KEY}"))
                    .await
                    .unwrap();
            let mut e = endpoint(&server, format);
            e.auth = Some(auth());
            let (c, _) = client_for(e);
            // The credential was sent: the server accepted the request.
            let r = c
                .complete(&request(opening(), true), &mut NoEvents)
                .await
                .unwrap();
            assert_eq!(r.text(), "authenticated");
            let mut errors = Vec::new();
            for _ in 0..3 {
                errors.push(
                    c.complete(&request(opening(), true), &mut NoEvents)
                        .await
                        .unwrap_err(),
                );
            }
            assert_eq!(
                errors.iter().map(|e| e.code()).collect::<Vec<_>>(),
                vec![
                    "model_request_rejected",
                    "model_provider_unavailable",
                    "model_stream_error"
                ],
                "{format:?} {name}"
            );
            for err in &errors {
                for text in [err.to_string(), format!("{err:?}")] {
                    assert!(clean(&text), "{format:?} {name}: the key leaked: {text}");
                    assert!(
                        text.contains("Incorrect API key provided"),
                        "the message itself is kept: {text}"
                    );
                }
            }
            assert!(clean(&format!("{c:?}")), "Debug of the client shows no key");
            assert_eq!(
                server.violations(),
                Vec::<String>::new(),
                "{format:?} {name}"
            );
            // Sent only in its header: no request body holds it.
            for req in server.requests() {
                assert!(clean(&String::from_utf8_lossy(&req.raw)));
                assert_eq!(
                    req.header("authorization"),
                    Some(format!("Bearer {KEY}").as_str())
                );
            }
        }
    }
}

#[tokio::test]
async fn agt_2_scrubbing_is_what_removes_the_key_positive_control() {
    // The same echo through a client that holds no credential (so has
    // nothing to scrub) shows the key: the provider text really reaches
    // the error, and the scrub is what removes it above.
    let echo = format!("Incorrect API key provided: {KEY}");
    let server = ScriptedServer::start([Step::status(400, "invalid_request_error", &echo)])
        .await
        .unwrap();
    let (c, _) = client(&server, WireFormat::OpenAiChat);
    let e = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap_err();
    assert!(!clean(&e.to_string()), "{e}");
}

#[tokio::test]
async fn agt_2_a_failed_response_message_is_scrubbed_too() {
    let server = ScriptedServer::start([Step::text("x").fault(Fault::Failed {
        code: "invalid_prompt".into(),
        message: format!("your prompt contained {KEY}"),
    })])
    .await
    .unwrap();
    let mut e = endpoint(&server, WireFormat::OpenAiResponses);
    e.auth = Some(auth());
    let (c, _) = client_for(e);
    let r = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap();
    let f = r.failure.unwrap();
    assert!(clean(&f.message), "{}", f.message);
    assert!(f.message.contains("[REDACTED]"));
}
