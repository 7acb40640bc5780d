//! Each wire format, streamed and not, carries a tool conversation both
//! ways: the model's calls come back ready with their arguments, and the
//! results go back in the place and shape the provider requires (the
//! scripted server's transcript check refuses anything else).

use airlock_model::{CallStatus, Message, ModelClient, StopReason, StreamEvent, WireFormat};
use airlock_modeltest::{ScriptedServer, Step, call};
use serde_json::{Value, json};

use super::common::*;

/// Where the result of `id` must sit in the second request, per format.
fn result_placed_right(
    format: WireFormat,
    body: &Value,
    id: &str,
    content: &str,
    is_error: bool,
) -> Result<(), String> {
    let ok = match format {
        WireFormat::OpenAiChat => {
            let m = body["messages"].as_array().ok_or("no messages")?;
            m.iter().any(|x| {
                x["role"] == "tool"
                    && x["tool_call_id"] == id
                    && x["content"]
                        == if is_error {
                            format!("Error: {content}")
                        } else {
                            content.to_string()
                        }
            })
        }
        WireFormat::OpenAiResponses => {
            let i = body["input"].as_array().ok_or("no input")?;
            i.iter().any(|x| {
                x["type"] == "function_call_output"
                    && x["call_id"] == id
                    && x["output"]
                        == if is_error {
                            format!("Error: {content}")
                        } else {
                            content.to_string()
                        }
            })
        }
        WireFormat::AnthropicMessages => {
            let m = body["messages"].as_array().ok_or("no messages")?;
            m.iter().any(|x| {
                x["role"] == "user"
                    && x["content"].as_array().is_some_and(|blocks| {
                        blocks.iter().any(|b| {
                            b["type"] == "tool_result"
                                && b["tool_use_id"] == id
                                && b["content"] == content
                                && (b.get("is_error") == Some(&json!(true))) == is_error
                        })
                    })
            })
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("no result for {id} in {body}"))
    }
}

#[tokio::test]
async fn agt_2_two_step_tool_conversation_round_trips_in_every_format() {
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([
            Step::text_and_calls(
                "Let me look.",
                vec![call("call_1", "read_file", r#"{"path": "a.txt"}"#)],
            )
            .check(move |b| {
                if b["stream"] != json!(stream) {
                    return Err(format!("stream flag {}", b["stream"]));
                }
                Ok(())
            }),
            Step::text("The file says hi.")
                .check(move |b| result_placed_right(format, b, "call_1", "hi", false)),
        ])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let mut messages = opening();
        let (first, events) = send(&c, &request(messages.clone(), stream)).await;
        let first = first.unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(first.text(), "Let me look.", "{label}");
        assert_eq!(first.stop_reason, StopReason::ToolCalls, "{label}");
        let calls: Vec<_> = first.tool_calls().collect();
        assert_eq!(calls.len(), 1, "{label}");
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("call_1", "read_file")
        );
        assert_eq!(
            calls[0].ready().map(|a| Value::Object(a.clone())),
            Some(json!({"path": "a.txt"})),
            "{label}"
        );
        if stream {
            // Progress arrives as it streams: text deltas and the call's
            // start and completion.
            let text: String = events
                .iter()
                .filter_map(|e| match e {
                    StreamEvent::TextDelta { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(text, "Let me look.", "{label}");
            assert!(events.contains(&StreamEvent::ToolCallStarted {
                id: "call_1".into(),
                name: "read_file".into()
            }));
            assert!(
                events.contains(&StreamEvent::ToolCallDone {
                    id: "call_1".into()
                }),
                "{label}"
            );
        }
        assert_eq!(
            events.first(),
            Some(&StreamEvent::AttemptStarted { attempt: 1 })
        );
        messages.push(first.to_message());
        messages.push(Message::tool_result("call_1", "hi"));
        let (second, _) = send(&c, &request(messages, stream)).await;
        let second = second.unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(second.text(), "The file says hi.", "{label}");
        assert_eq!(second.stop_reason, StopReason::EndTurn, "{label}");
        assert_eq!(second.tool_calls().count(), 0);
        assert_eq!(server.violations(), Vec::<String>::new(), "{label}");
        assert_eq!(server.requests().len(), 2, "{label}");
        assert_eq!(server.remaining(), 0, "{label}");
    }
}

#[tokio::test]
async fn agt_2_parallel_calls_keep_their_order_ids_and_arguments() {
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let mut step = Step::calls(vec![
            call("c_a", "read_file", r#"{"path": "a"}"#),
            call("c_b", "run_command", r#"{"argv": ["ls", "-l"]}"#),
            call("c_c", "read_file", r#"{"path": "ç/ü"}"#),
        ])
        .fragment(3);
        if format == WireFormat::OpenAiChat {
            // Fragments of the three calls arrive interleaved by index.
            step = step.interleave();
        }
        let server = ScriptedServer::start([
            step,
            Step::text("done").check(move |b| {
                result_placed_right(format, b, "c_a", "A", false)?;
                result_placed_right(format, b, "c_b", "not allowed", true)?;
                result_placed_right(format, b, "c_c", "C", false)
            }),
        ])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let mut req = request(opening(), stream);
        req.parallel_tool_calls = Some(true);
        let r = c
            .complete(&req, &mut airlock_model::NoEvents)
            .await
            .unwrap();
        let got: Vec<(String, String, Value)> = r
            .tool_calls()
            .map(|c| {
                (
                    c.id.clone(),
                    c.name.clone(),
                    Value::Object(c.ready().cloned().unwrap_or_default()),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("c_a".into(), "read_file".into(), json!({"path": "a"})),
                (
                    "c_b".into(),
                    "run_command".into(),
                    json!({"argv": ["ls", "-l"]})
                ),
                ("c_c".into(), "read_file".into(), json!({"path": "ç/ü"})),
            ],
            "{label}"
        );
        let mut messages = opening();
        messages.push(r.to_message());
        messages.push(Message::tool_result("c_a", "A"));
        messages.push(Message::tool_error("c_b", "not allowed"));
        messages.push(Message::tool_result("c_c", "C"));
        // User text after the results: for Anthropic it shares their user
        // message and must come after the tool_result blocks.
        messages.push(Message::user("Carry on."));
        let mut req = request(messages, stream);
        req.parallel_tool_calls = Some(true);
        let r = c
            .complete(&req, &mut airlock_model::NoEvents)
            .await
            .unwrap();
        assert_eq!(r.text(), "done", "{label}");
        assert_eq!(server.violations(), Vec::<String>::new(), "{label}");
    }
}

#[tokio::test]
async fn agt_2_malformed_conversation_is_refused_before_anything_is_sent() {
    for format in ALL {
        let server = ScriptedServer::start([Step::text("ok")]).await.unwrap();
        let (c, _) = client(&server, format);
        let first = airlock_model::ScriptedReply::calls(
            &[("x1", "read_file", "{}")],
            StopReason::ToolCalls,
        );
        let airlock_model::ScriptedReply::Response(first) = first else {
            unreachable!()
        };
        let mut messages = opening();
        messages.push(first.to_message());
        // The call has no result: refused here, never sent.
        let e = c
            .complete(
                &request(messages.clone(), true),
                &mut airlock_model::NoEvents,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), "model_request_invalid", "{e}");
        assert!(e.to_string().contains("has no result"), "{e}");
        assert_eq!(server.requests().len(), 0);
        // Positive control: with its result the same conversation is sent.
        messages.push(Message::tool_result("x1", "ok"));
        let r = c
            .complete(&request(messages, true), &mut airlock_model::NoEvents)
            .await
            .unwrap();
        assert_eq!(r.text(), "ok");
        assert_eq!(server.requests().len(), 1);
        assert_eq!(server.violations(), Vec::<String>::new());
    }
}

#[tokio::test]
async fn agt_2_invalid_and_truncated_calls_still_get_a_well_formed_result_turn() {
    // A call that is not ready stays in the transcript and is answered
    // with an error result; every provider accepts that turn (Anthropic's
    // input becomes {} when the argument text is not an object).
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([
            Step::calls(vec![call("bad_1", "read_file", r#"{"path": "a"#)]),
            Step::text("sorry").check(move |b| {
                let msg = "tool call not executed";
                let text = b.to_string();
                if !text.contains(msg) {
                    return Err(format!("{label}: the error result is missing"));
                }
                Ok(())
            }),
        ])
        .await
        .unwrap();
        let (c, _) = client(&server, format);
        let r = c
            .complete(&request(opening(), stream), &mut airlock_model::NoEvents)
            .await
            .unwrap();
        let call = r.tool_calls().next().unwrap().clone();
        assert!(
            matches!(call.status, CallStatus::InvalidArguments { .. }),
            "{call:?}"
        );
        let mut messages = opening();
        messages.push(r.to_message());
        messages.push(Message::tool_error(
            &call.id,
            call.error_for_model().unwrap(),
        ));
        let r = c
            .complete(&request(messages, stream), &mut airlock_model::NoEvents)
            .await
            .unwrap();
        assert_eq!(r.text(), "sorry");
        assert_eq!(
            server.violations(),
            Vec::<String>::new(),
            "{format:?} {stream}"
        );
    }
}
