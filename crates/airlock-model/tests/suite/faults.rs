//! What the provider gets wrong: arguments that do not parse, calls cut by
//! the token limit, streams that end early, error events, bytes that are
//! not the format at all. Nothing of it may become an executable call.

use airlock_model::{
    ArgumentsError, CallStatus, ModelClient, ModelError, NoEvents, StopReason, StreamEvent,
    WireFormat,
};
use airlock_modeltest::{Fault, ScriptedServer, Step, call};

use super::common::*;

#[tokio::test]
async fn agt_2_partial_and_invalid_arguments_become_parse_errors() {
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([Step::calls(vec![
            call("ok", "read_file", r#"{"path": "a"}"#),
            call("partial", "read_file", r#"{"path": "a"#),
            call("prose", "read_file", "read the file a.txt please"),
            call("array", "run_command", r#"["ls"]"#),
        ])])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolCalls, "{label}");
        let calls: Vec<_> = r.tool_calls().collect();
        assert_eq!(calls.len(), 4, "{label}");
        // Positive control: the well-formed call in the same response is ready.
        assert!(calls[0].ready().is_some(), "{label}: {:?}", calls[0]);
        for c in &calls[1..] {
            let CallStatus::InvalidArguments { error } = &c.status else {
                panic!("{label}: {} is {:?}", c.id, c.status);
            };
            // A whole Anthropic body carries input as JSON, so text that is
            // not JSON arrives as a string: the wrong type, refused alike.
            let expected_kind = match (format, stream, error) {
                (WireFormat::AnthropicMessages, false, ArgumentsError::NotAnObject { .. }) => true,
                (_, _, ArgumentsError::NotJson { .. }) => c.id != "array",
                (_, _, ArgumentsError::NotAnObject { .. }) => c.id == "array",
                _ => false,
            };
            assert!(expected_kind, "{label}: {} → {error:?}", c.id);
            assert!(c.ready().is_none());
            assert!(
                c.error_for_model()
                    .is_some_and(|m| m.contains("not executed"))
            );
        }
    }
}

#[tokio::test]
async fn agt_2_length_truncated_calls_are_never_executable() {
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let calls = || {
            vec![
                call("t1", "read_file", r#"{"path": "first"}"#),
                call("t2", "run_command", r#"{"argv": ["rm", "-rf", "build"]}"#),
            ]
        };
        let server = ScriptedServer::start([
            Step::calls(calls()).fault(Fault::Truncate),
            // Positive control: the same calls without the limit are ready.
            Step::calls(calls()),
        ])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!(r.stop_reason, StopReason::MaxTokens, "{label}");
        assert_eq!(
            r.attempts, 1,
            "{label}: a truncated answer is an answer, not retried"
        );
        for call in r.tool_calls() {
            // Even the first call, whose arguments are whole and which the
            // provider may have marked done, is not ready: the response as
            // a whole was cut.
            assert_eq!(
                call.status,
                CallStatus::Incomplete {
                    reason: StopReason::MaxTokens
                },
                "{label}: {}",
                call.id
            );
            assert!(
                call.error_for_model()
                    .is_some_and(|m| m.contains("output token limit"))
            );
        }
        assert_eq!(r.tool_calls().count(), 2, "{label}");
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!(
            r.tool_calls().filter(|c| c.ready().is_some()).count(),
            2,
            "{label}"
        );
        assert_eq!(server.violations(), Vec::<String>::new());
    }
}

#[tokio::test]
async fn agt_2_streams_closed_before_their_terminal_event_are_retried() {
    // (format, stream, fault): a clean end without the terminal event, a
    // reset connection; a whole body reset halfway.
    let mut cases = Vec::new();
    for format in ALL {
        cases.push((format, true, Fault::CutAfter(3)));
        cases.push((format, true, Fault::AbortAfter(4)));
        cases.push((format, false, Fault::AbortAfter(1)));
    }
    for (format, stream, fault) in cases {
        let label = format!("{} stream={stream} {fault:?}", format.name());
        let good = || Step::calls(vec![call("r1", "read_file", r#"{"path": "a"}"#)]);
        let server = ScriptedServer::start([good().fault(fault.clone()), good()])
            .await
            .unwrap();
        let (c, clock) = client(&server, format);
        let (r, events) = send(&c, &request(opening(), stream)).await;
        let r = r.unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(r.attempts, 2, "{label}");
        assert!(r.tool_calls().all(|c| c.ready().is_some()), "{label}");
        assert_eq!(clock.slept().len(), 1, "{label}");
        let retry = events.iter().find_map(|e| match e {
            StreamEvent::Retrying { code, .. } => Some(*code),
            _ => None,
        });
        let expected = if stream && matches!(fault, Fault::CutAfter(_)) {
            "model_stream_cut"
        } else {
            "model_transport_failed"
        };
        assert_eq!(retry, Some(expected), "{label}");
        assert!(events.contains(&StreamEvent::AttemptStarted { attempt: 2 }));
        assert_eq!(server.requests().len(), 2, "{label}");
    }
}

#[tokio::test]
async fn agt_2_a_stream_that_is_always_cut_fails_after_the_bound() {
    for format in ALL {
        let cut = || Step::calls(vec![call("r1", "read_file", "{}")]).fault(Fault::CutAfter(2));
        let server = ScriptedServer::start([cut(), cut(), cut(), cut(), cut()])
            .await
            .unwrap();
        let (c, clock) = client(&server, format);
        let e = c
            .complete(&request(opening(), true), &mut NoEvents)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ModelError::RetriesExhausted { attempts: 4, last } if matches!(**last, ModelError::StreamCut)),
            "{e:?}"
        );
        assert_eq!(e.code(), "model_stream_cut");
        assert_eq!(server.requests().len(), 4);
        assert_eq!(clock.slept().len(), 3);
    }
}

#[tokio::test]
async fn agt_2_provider_error_events_retry_when_transient() {
    // (format, fault, retried?)
    let cases = [
        (
            WireFormat::AnthropicMessages,
            Fault::ErrorEvent {
                kind: "overloaded_error".into(),
                message: "Overloaded".into(),
            },
            true,
        ),
        (
            WireFormat::AnthropicMessages,
            Fault::ErrorEvent {
                kind: "invalid_request_error".into(),
                message: "bad".into(),
            },
            false,
        ),
        (
            WireFormat::OpenAiChat,
            Fault::ErrorEvent {
                kind: "server_error".into(),
                message: "oops".into(),
            },
            true,
        ),
        (
            WireFormat::OpenAiChat,
            Fault::ErrorEvent {
                kind: "invalid_request_error".into(),
                message: "bad".into(),
            },
            false,
        ),
        (
            WireFormat::OpenAiResponses,
            Fault::ErrorEvent {
                kind: "server_error".into(),
                message: "oops".into(),
            },
            true,
        ),
        (
            WireFormat::OpenAiResponses,
            Fault::Failed {
                code: "server_error".into(),
                message: "oops".into(),
            },
            true,
        ),
    ];
    for (format, fault, retried) in cases {
        for stream in [true, false] {
            let label = format!("{} stream={stream} {fault:?}", format.name());
            let server =
                ScriptedServer::start([Step::text("x").fault(fault.clone()), Step::text("fine")])
                    .await
                    .unwrap();
            let (c, _) = client(&server, format);
            let r = c.complete(&request(opening(), stream), &mut NoEvents).await;
            if retried {
                let r = r.unwrap_or_else(|e| panic!("{label}: {e}"));
                assert_eq!((r.text().as_str(), r.attempts), ("fine", 2), "{label}");
            } else {
                let e = r.unwrap_err();
                assert_eq!(e.code(), "model_stream_error", "{label}: {e}");
                assert!(
                    e.to_string().contains("invalid_request_error"),
                    "{label}: {e}"
                );
                assert_eq!(server.requests().len(), 1, "{label}");
            }
        }
    }
}

#[tokio::test]
async fn agt_2_a_failed_response_is_an_error_stop_with_nothing_executable() {
    for stream in [true, false] {
        let server = ScriptedServer::start([Step::calls(vec![call("f1", "read_file", "{}")])
            .fault(Fault::Failed {
                code: "invalid_prompt".into(),
                message: "the prompt was refused".into(),
            })])
        .await
        .unwrap();
        let (c, _) = client(&server, WireFormat::OpenAiResponses);
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!(r.stop_reason, StopReason::Error);
        let f = r.failure.clone().unwrap();
        assert_eq!(
            (f.kind.as_str(), f.message.as_str()),
            ("invalid_prompt", "the prompt was refused")
        );
        assert!(r.tool_calls().all(|c| c.ready().is_none()));
        assert_eq!(r.attempts, 1);
    }
}

#[tokio::test]
async fn agt_2_non_json_model_output_is_a_clear_error() {
    for format in ALL {
        for (stream, garbage) in [
            (false, "<html><body>502 Bad Gateway</body></html>"),
            (true, "data: {this is not json}\n\n"),
            (false, ""),
        ] {
            let label = format!("{} stream={stream} {garbage:?}", format.name());
            let server = ScriptedServer::start([
                Step::text("x").fault(Fault::Garbage(garbage.into())),
                Step::text("never"),
            ])
            .await
            .unwrap();
            let (c, _) = client(&server, format);
            let e = c
                .complete(&request(opening(), stream), &mut NoEvents)
                .await
                .unwrap_err();
            assert_eq!(e.code(), "model_response_invalid", "{label}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("not JSON") && text.contains(format.name()),
                "{label}: {text}"
            );
            // Not retried: the same server would say the same.
            assert_eq!(server.requests().len(), 1, "{label}");
        }
    }
}

#[tokio::test]
async fn agt_2_responses_without_the_required_parts_are_clear_errors() {
    // Well-formed JSON in the wrong shape for the format.
    for format in ALL {
        let server = ScriptedServer::start([
            Step::text("x").fault(Fault::Garbage(r#"{"hello": "world"}"#.into()))
        ])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let e = c
            .complete(&request(opening(), false), &mut NoEvents)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "model_response_invalid", "{format:?}: {e}");
    }
}
