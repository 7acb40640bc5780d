//! Decoders against provider bytes written by hand from each provider's
//! documentation and from what compatible servers send (independent of
//! the scripted server), plus properties over arbitrary and cut input.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{decode_body, decode_stream};
use crate::error::ModelError;
use crate::profile::WireFormat;
use crate::response::{CallStatus, ModelResponse, StopReason, Usage};

const MAX_ARGS: usize = 1 << 20;

fn sse(lines: &[&str]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("{l}\n\n"))
        .collect::<String>()
        .into_bytes()
}

fn calls(r: &ModelResponse) -> Vec<(String, String, Option<Value>)> {
    r.tool_calls()
        .map(|c| {
            (
                c.id.clone(),
                c.name.clone(),
                c.ready().map(|a| Value::Object(a.clone())),
            )
        })
        .collect()
}

/// OpenAI: two parallel calls, fragments by index, usage in a last chunk
/// with empty choices.
fn openai_chat_parallel() -> Vec<u8> {
    let head = r#""id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o""#;
    sse(&[
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":null,"tool_calls":[{{"index":0,"id":"call_a","type":"function","function":{{"name":"get_weather","arguments":""}}}}]}},"finish_reason":null}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"{{\"ci"}}}}]}},"finish_reason":null}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"ty\": \"Paris\"}}"}}}}]}},"finish_reason":null}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":1,"id":"call_b","type":"function","function":{{"name":"get_time","arguments":""}}}}]}},"finish_reason":null}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":1,"function":{{"arguments":"{{}}"}}}}]}},"finish_reason":null}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[{{"index":0,"delta":{{}},"finish_reason":"tool_calls"}}]}}"#
        ),
        &format!(
            r#"data: {{{head},"choices":[],"usage":{{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99,"prompt_tokens_details":{{"cached_tokens":64,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0}}}}}}"#
        ),
        "data: [DONE]",
    ])
}

/// A compatible server: no index, the id repeated on every fragment,
/// `finish_reason: stop` with calls, usage on the finishing chunk.
fn compatible_chat() -> Vec<u8> {
    sse(&[
        r#"data: {"choices":[{"delta":{"tool_calls":[{"id":"x1","type":"function","function":{"name":"ls","arguments":"{\"a\""}}]},"index":0}]}"#,
        r#"data: {"choices":[{"delta":{"tool_calls":[{"id":"x1","function":{"arguments":":1}"}}]},"index":0}]}"#,
        r#"data: {"choices":[{"delta":{},"finish_reason":"stop","index":0}],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
        "data: [DONE]",
    ])
}

/// Anthropic: a thinking block (ignored), a ping, a tool without
/// arguments, cache counts.
fn anthropic_thinking_tool() -> Vec<u8> {
    sse(&[
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":50,\"cache_creation_input_tokens\":10,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"abc\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
        "event: ping\ndata: {\"type\": \"ping\"}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Listing.\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"list_files\",\"input\":{}}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":40}}",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}",
    ])
}

/// Responses: a reasoning item, then a function call.
fn responses_reasoning_call(done: bool) -> Vec<u8> {
    let mut lines = vec![
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"model\":\"gpt-5\",\"output\":[]}}",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"in_progress\",\"arguments\":\"\",\"call_id\":\"call_9\",\"name\":\"read_file\"}}",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"output_index\":1,\"delta\":\"{\\\"path\\\":\"}",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"delta\":\"\\\"x\\\"}\"}",
        "event: response.function_call_arguments.done\ndata: {\"type\":\"response.function_call_arguments.done\",\"item_id\":\"fc_1\",\"output_index\":1,\"arguments\":\"{\\\"path\\\":\\\"x\\\"}\"}",
    ];
    if done {
        lines.push("event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{\\\"path\\\":\\\"x\\\"}\",\"call_id\":\"call_9\",\"name\":\"read_file\"}}");
    }
    lines.push("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"model\":\"gpt-5\",\"output\":[],\"usage\":{\"input_tokens\":300,\"input_tokens_details\":{\"cached_tokens\":128},\"output_tokens\":90,\"output_tokens_details\":{\"reasoning_tokens\":64},\"total_tokens\":390}}}");
    sse(&lines)
}

#[test]
fn agt_2_provider_stream_samples() {
    let r = decode_stream(WireFormat::OpenAiChat, &openai_chat_parallel(), MAX_ARGS).unwrap();
    assert_eq!(
        calls(&r),
        vec![
            (
                "call_a".into(),
                "get_weather".into(),
                Some(json!({"city": "Paris"}))
            ),
            ("call_b".into(), "get_time".into(), Some(json!({}))),
        ]
    );
    assert_eq!(r.stop_reason, StopReason::ToolCalls);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 82,
            cached_input_tokens: 64,
            output_tokens: 17,
            reasoning_tokens: 0
        }
    );
    assert_eq!(
        (r.response_id.as_deref(), r.model.as_deref()),
        (Some("chatcmpl-1"), Some("gpt-4o"))
    );

    let r = decode_stream(WireFormat::OpenAiChat, &compatible_chat(), MAX_ARGS).unwrap();
    assert_eq!(
        calls(&r),
        vec![("x1".into(), "ls".into(), Some(json!({"a": 1})))]
    );
    assert_eq!(r.stop_reason, StopReason::ToolCalls, "`stop` with calls");
    assert_eq!(r.provider_stop.as_deref(), Some("stop"));
    assert_eq!(r.usage.total_tokens(), 8);

    let r = decode_stream(
        WireFormat::AnthropicMessages,
        &anthropic_thinking_tool(),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(r.text(), "Listing.", "thinking is not text");
    assert_eq!(
        calls(&r),
        vec![("toolu_1".into(), "list_files".into(), Some(json!({})))]
    );
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 160,
            cached_input_tokens: 100,
            output_tokens: 40,
            reasoning_tokens: 0
        }
    );

    let r = decode_stream(
        WireFormat::OpenAiResponses,
        &responses_reasoning_call(true),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(
        calls(&r),
        vec![(
            "call_9".into(),
            "read_file".into(),
            Some(json!({"path": "x"}))
        )]
    );
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 300,
            cached_input_tokens: 128,
            output_tokens: 90,
            reasoning_tokens: 64
        }
    );
    // Without its output_item.done the call was never marked complete:
    // not ready, even in a completed response.
    let r = decode_stream(
        WireFormat::OpenAiResponses,
        &responses_reasoning_call(false),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(
        r.tool_calls().next().map(|c| c.status.clone()),
        Some(CallStatus::Incomplete {
            reason: StopReason::Incomplete
        })
    );
}

#[test]
fn agt_2_stream_edge_cases() {
    // [DONE] without a finish reason: nothing is ready.
    let no_finish = sse(&[
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        "data: [DONE]",
    ]);
    let r = decode_stream(WireFormat::OpenAiChat, &no_finish, MAX_ARGS).unwrap();
    assert_eq!(r.stop_reason, StopReason::Incomplete);
    assert!(r.tool_calls().all(|c| c.ready().is_none()));
    // finish_reason length mid-arguments.
    let length = sse(&[
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\": [1, 2"}}]}}]}"#,
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
        "data: [DONE]",
    ]);
    let r = decode_stream(WireFormat::OpenAiChat, &length, MAX_ARGS).unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        r.tool_calls().next().map(|c| c.status.clone()),
        Some(CallStatus::Incomplete {
            reason: StopReason::MaxTokens
        })
    );
    // Anthropic cut by max_tokens after the block closed.
    let full = String::from_utf8(anthropic_thinking_tool()).unwrap();
    let max_tokens = full.replace(
        "\"stop_reason\":\"tool_use\"",
        "\"stop_reason\":\"max_tokens\"",
    );
    let r = decode_stream(
        WireFormat::AnthropicMessages,
        max_tokens.as_bytes(),
        MAX_ARGS,
    )
    .unwrap();
    assert!(r.tool_calls().all(|c| c.ready().is_none()));
    // Anything after the terminal event is ignored.
    let mut trailing = openai_chat_parallel();
    trailing.extend_from_slice(b"data: {not json}\n\n");
    assert!(decode_stream(WireFormat::OpenAiChat, &trailing, MAX_ARGS).is_ok());
    // Without its terminal event a stream is cut, in every format.
    for (format, bytes, terminal) in [
        (
            WireFormat::OpenAiChat,
            openai_chat_parallel(),
            "data: [DONE]",
        ),
        (
            WireFormat::AnthropicMessages,
            anthropic_thinking_tool(),
            "event: message_stop",
        ),
        (
            WireFormat::OpenAiResponses,
            responses_reasoning_call(true),
            "event: response.completed",
        ),
    ] {
        let text = String::from_utf8(bytes).unwrap();
        let cut = &text[..text.find(terminal).unwrap()];
        assert_eq!(
            decode_stream(format, cut.as_bytes(), MAX_ARGS).unwrap_err(),
            ModelError::StreamCut,
            "{format:?}"
        );
    }
}

#[test]
fn agt_2_body_samples() {
    let chat = json!({"id": "c1", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": {"k": "v"}}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4,
        "completion_tokens_details": {"reasoning_tokens": 2}}});
    let r = decode_body(
        WireFormat::OpenAiChat,
        chat.to_string().as_bytes(),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(
        calls(&r),
        vec![("t1".into(), "f".into(), Some(json!({"k": "v"})))],
        "object arguments from a compatible server"
    );
    assert_eq!(r.usage.reasoning_tokens, 2);
    let anthropic = json!({"id": "m1", "type": "message", "content": [{"type": "tool_use", "id": "u1", "name": "f", "input": {"x": 1}}],
        "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 1}});
    let r = decode_body(
        WireFormat::AnthropicMessages,
        anthropic.to_string().as_bytes(),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert!(r.tool_calls().all(|c| c.ready().is_none()));
    let responses = json!({"id": "r1", "status": "incomplete", "incomplete_details": {"reason": "content_filter"},
        "output": [{"type": "function_call", "call_id": "k", "name": "f", "arguments": "{}", "status": "completed"}]});
    let r = decode_body(
        WireFormat::OpenAiResponses,
        responses.to_string().as_bytes(),
        MAX_ARGS,
    )
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::ContentFilter);
    assert!(r.tool_calls().all(|c| c.ready().is_none()));
}

/// Every prefix of a stream that stops before its terminal event's data
/// line ended yields an error, never calls (all cut points are tried).
#[test]
fn agt_2_a_cut_stream_never_yields_calls() {
    for (format, bytes, terminal) in [
        (
            WireFormat::OpenAiChat,
            openai_chat_parallel(),
            "data: [DONE]",
        ),
        (
            WireFormat::AnthropicMessages,
            anthropic_thinking_tool(),
            "data: {\"type\":\"message_stop\"}",
        ),
        (
            WireFormat::OpenAiResponses,
            responses_reasoning_call(true),
            "data: {\"type\":\"response.completed\"",
        ),
    ] {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let start = text.find(terminal).unwrap();
        let terminal_end = start + text[start..].find('\n').unwrap() + 1;
        for cut in 0..=bytes.len() {
            match decode_stream(format, &bytes[..cut], MAX_ARGS) {
                Ok(r) => assert!(cut >= terminal_end, "{format:?} cut at {cut}: {r:?}"),
                Err(e) => {
                    assert!(cut < terminal_end, "{format:?} cut at {cut}: {e:?}");
                    assert!(
                        matches!(
                            e,
                            ModelError::StreamCut | ModelError::InvalidResponse { .. }
                        ),
                        "{e:?}"
                    );
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn agt_2_decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        for format in WireFormat::ALL {
            let _ = decode_stream(format, &bytes, 64);
            let _ = decode_body(format, &bytes, 64);
        }
    }

    /// The same bytes decode the same however the network cuts them.
    #[test]
    fn agt_2_chunking_does_not_change_the_response(split in 1usize..200) {
        for (format, bytes) in [
            (WireFormat::OpenAiChat, openai_chat_parallel()),
            (WireFormat::AnthropicMessages, anthropic_thinking_tool()),
            (WireFormat::OpenAiResponses, responses_reasoning_call(true)),
        ] {
            let whole = decode_stream(format, &bytes, MAX_ARGS).unwrap();
            let mut d = super::StreamDecoder::new(format, MAX_ARGS, 1 << 20);
            for chunk in bytes.chunks(split) {
                d.push(chunk, &mut crate::events::NoEvents).unwrap();
            }
            prop_assert_eq!(d.finish().unwrap(), whole);
        }
    }
}
