//! Size ceilings: a model that answers with 10 MiB of arguments gets a
//! clear refusal, never a crash or an unbounded buffer.

use airlock_model::{ArgumentsError, CallStatus, ModelClient, ModelError, NoEvents, WireFormat};
use airlock_modeltest::{ScriptedServer, Step, call};

use super::common::*;

/// A call whose arguments are 10 MiB of JSON (built once: it is slow to
/// build in a debug build).
fn huge_call() -> Step {
    static STEP: std::sync::OnceLock<Step> = std::sync::OnceLock::new();
    STEP.get_or_init(|| {
        let content = "A".repeat(10 << 20);
        let args = format!(r#"{{"path": "big.txt", "content": "{content}"}}"#);
        Step::calls(vec![call("big", "write_file", &args)]).fragment(256 * 1024)
    })
    .clone()
}

#[tokio::test]
async fn agt_2_ten_mib_arguments_are_refused_with_a_clear_error() {
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([huge_call(), Step::text("never")])
            .await
            .unwrap();
        // Default limits: 8 MiB per response.
        let (c, _) = client(&server, format);
        let e = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap_err();
        assert_eq!(e, ModelError::TooLarge { limit: 8 << 20 }, "{label}");
        assert_eq!(e.to_string(), "model response larger than 8388608 bytes");
        assert_eq!(server.requests().len(), 1, "{label}: not retried");
    }
}

#[tokio::test]
async fn agt_2_the_argument_ceiling_refuses_one_call_not_the_response() {
    for (format, stream) in [
        (WireFormat::OpenAiChat, true),
        (WireFormat::AnthropicMessages, true),
        (WireFormat::OpenAiResponses, false),
    ] {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([
            Step::calls(vec![
                call("small", "read_file", r#"{"path": "a"}"#),
                call("big", "write_file", "{}"),
            ]),
            huge_call(),
        ])
        .await
        .unwrap();
        let mut e = endpoint(&server, format);
        e.limits.max_response_bytes = 64 << 20;
        e.limits.max_argument_bytes = 1 << 20;
        let (c, _) = client_for(e);
        // Positive control: small arguments pass under the same limits.
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        assert!(r.tool_calls().all(|c| c.ready().is_some()), "{label}");
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        let big = r.tool_calls().next().unwrap();
        assert_eq!(
            big.status,
            CallStatus::InvalidArguments {
                error: ArgumentsError::TooLarge { limit: 1 << 20 }
            },
            "{label}"
        );
        assert!(big.arguments.len() <= 1 << 20, "the kept text is bounded");
        assert!(
            big.error_for_model()
                .unwrap()
                .contains("larger than 1048576 bytes")
        );
    }
}
