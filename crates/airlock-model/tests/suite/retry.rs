//! Retries: which failures are retried, how long the client waits (read
//! from the manual clock, so nothing here sleeps), and where it stops.
//! The timeouts are real but only ever fire on a server that stays silent,
//! so their outcome does not depend on how fast the machine is.

use std::time::Duration;

use airlock_model::{ModelClient, ModelError, NoEvents, RetryLimits, StreamEvent, WireFormat};
use airlock_modeltest::{Fault, ScriptedServer, Step};

use super::common::*;

#[tokio::test]
async fn agt_2_429_retry_after_is_honoured_in_each_form() {
    let date = httpdate::fmt_http_date(now() + Duration::from_secs(30));
    // (header, value, expected wait)
    let cases = [
        ("retry-after", "7".to_string(), Duration::from_secs(7)),
        ("retry-after", date, Duration::from_secs(30)),
        (
            "retry-after-ms",
            "1500".to_string(),
            Duration::from_millis(1500),
        ),
    ];
    for format in ALL {
        for (header, value, wait) in &cases {
            let server = ScriptedServer::start([
                Step::status(429, "rate_limit_error", "slow down").header(header, value),
                Step::text("ok"),
            ])
            .await
            .unwrap();
            let (c, clock) = client(&server, format);
            let (r, events) = send(&c, &request(opening(), true)).await;
            let r = r.unwrap();
            assert_eq!((r.text().as_str(), r.attempts), ("ok", 2));
            assert_eq!(clock.slept(), vec![*wait], "{format:?} {header}: {value}");
            assert!(events.contains(&StreamEvent::Retrying {
                next_attempt: 2,
                wait: *wait,
                code: "model_rate_limited"
            }));
        }
    }
}

#[tokio::test]
async fn agt_2_429_without_retry_after_backs_off_exponentially() {
    let server = ScriptedServer::start([
        Step::status(429, "rate_limit_error", "a"),
        Step::status(429, "rate_limit_error", "b"),
        Step::status(529, "overloaded_error", "c"),
        Step::text("ok"),
    ])
    .await
    .unwrap();
    let (c, clock) = client(&server, WireFormat::AnthropicMessages);
    let r = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap();
    assert_eq!(r.attempts, 4);
    // Jitter 0 gives the lower half of 0.5 s, 1 s, 2 s.
    assert_eq!(
        clock.slept(),
        vec![
            Duration::from_millis(250),
            Duration::from_millis(500),
            Duration::from_secs(1)
        ]
    );
}

#[tokio::test]
async fn agt_2_500_is_retried_up_to_the_bound_then_fails_clearly() {
    for format in ALL {
        let fail = || Step::status(500, "api_error", "internal failure");
        let server = ScriptedServer::start([fail(), fail(), fail(), Step::text("too late")])
            .await
            .unwrap();
        let mut e = endpoint(&server, format);
        e.retry.limits = RetryLimits {
            max_attempts: 3,
            max_wait: Duration::from_secs(60),
        };
        let (c, clock) = client_for(e.clone());
        let err = c
            .complete(&request(opening(), true), &mut NoEvents)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "model_provider_unavailable", "{err}");
        let ModelError::RetriesExhausted { attempts, last } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*attempts, 3);
        assert!(matches!(**last, ModelError::Status { status: 500, .. }));
        assert_eq!(
            err.to_string(),
            "model request failed after 3 attempts: model provider answered 500 (api_error): internal failure"
        );
        assert_eq!(server.requests().len(), 3, "exactly the bound");
        assert_eq!(clock.slept().len(), 2);
        // Positive control: the same bound with one failure less succeeds.
        let server = ScriptedServer::start([fail(), fail(), Step::text("in time")])
            .await
            .unwrap();
        let (c, _) = client_for(
            ModelEndpoint::new(format, &server.base_url())
                .map(|mut x| {
                    x.retry = e.retry;
                    x
                })
                .unwrap(),
        );
        let r = c
            .complete(&request(opening(), true), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!((r.text().as_str(), r.attempts), ("in time", 3));
    }
}

use airlock_model::ModelEndpoint;

#[tokio::test]
async fn agt_2_4xx_other_than_429_is_not_retried() {
    // (status, expected code, requests made)
    let cases = [
        (400, "model_request_rejected", 1),
        (401, "model_auth_failed", 1),
        (403, "model_auth_failed", 1),
        (404, "model_request_rejected", 1),
        (408, "model_request_rejected", 1),
        (422, "model_request_rejected", 1),
        // Positive control: a 429 is retried.
        (429, "ok", 2),
        (503, "ok", 2),
        (529, "ok", 2),
    ];
    for (status, code, requests) in cases {
        let server =
            ScriptedServer::start([Step::status(status, "some_error", "nope"), Step::text("ok")])
                .await
                .unwrap();
        let (c, _) = client(&server, WireFormat::OpenAiChat);
        match c.complete(&request(opening(), false), &mut NoEvents).await {
            Ok(r) => assert_eq!(r.text(), code, "{status}"),
            Err(e) => {
                assert_eq!(e.code(), code, "{status}: {e}");
                assert!(
                    matches!(e, ModelError::Status { status: s, .. } if s == status),
                    "{e:?}"
                );
            }
        }
        assert_eq!(server.requests().len(), requests, "{status}");
    }
}

#[tokio::test]
async fn agt_2_retry_after_beyond_the_wait_budget_is_not_waited_for() {
    let server = ScriptedServer::start([
        Step::status(429, "rate_limit_error", "come back in an hour").header("retry-after", "3600"),
        Step::text("never"),
    ])
    .await
    .unwrap();
    let (c, clock) = client(&server, WireFormat::OpenAiResponses);
    let e = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "model_rate_limited");
    let ModelError::RetriesExhausted { attempts: 1, last } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(last.retry_after(), Some(Duration::from_secs(3600)));
    assert!(clock.slept().is_empty(), "nothing was waited for");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn agt_2_stream_idle_timeout_and_head_timeout_end_an_attempt() {
    for (fault, code) in [
        (Fault::StallAfter(2), "stream_idle"),
        (Fault::NoHead, "response_head"),
    ] {
        for format in ALL {
            let label = format!("{} {fault:?}", format.name());
            let ok = || Step::calls(vec![airlock_modeltest::call("i1", "read_file", "{}")]);
            let server =
                ScriptedServer::start([ok().fault(fault.clone()), ok().fault(fault.clone()), ok()])
                    .await
                    .unwrap();
            let mut e = endpoint(&server, format);
            e.limits.idle_timeout = Duration::from_secs(1);
            e.limits.head_timeout = Duration::from_secs(1);
            e.retry.limits.max_attempts = 2;
            let (c, _) = client_for(e.clone());
            let err = c
                .complete(&request(opening(), true), &mut NoEvents)
                .await
                .unwrap_err();
            let ModelError::RetriesExhausted { attempts: 2, last } = &err else {
                panic!("{label}: {err:?}");
            };
            assert_eq!(**last, ModelError::Timeout(code), "{label}");
            assert_eq!(err.code(), "model_timeout");
            // Positive control: the same limits, and the third step answers
            // at once: no timeout.
            let r = c
                .complete(&request(opening(), true), &mut NoEvents)
                .await
                .unwrap();
            assert_eq!(r.attempts, 1, "{label}");
        }
    }
}
