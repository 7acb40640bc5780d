//! Token usage in each format (cached and reasoning tokens included) and
//! the cost of it at a profile's prices.

use airlock_model::{Cost, ModelClient, ModelProfile, NoEvents, PriceUnknown, Usage, WireFormat};
use airlock_modeltest::{ScriptedServer, Step};

use super::common::*;

#[tokio::test]
async fn agt_2_usage_is_parsed_in_every_format_with_cached_and_reasoning_tokens() {
    let scripted = airlock_modeltest::Usage {
        input: 1200,
        cached: 200,
        output: 300,
        reasoning: 100,
    };
    for (format, stream) in modes() {
        let label = format!("{} stream={stream}", format.name());
        let server = ScriptedServer::start([Step::text("hello").usage(scripted)])
            .await
            .unwrap();
        let (c, _) = client(&server, format);
        let r = c
            .complete(&request(opening(), stream), &mut NoEvents)
            .await
            .unwrap();
        let expected = Usage {
            input_tokens: 1200,
            cached_input_tokens: 200,
            output_tokens: 300,
            // Anthropic does not break thinking out of its output count.
            reasoning_tokens: if format == WireFormat::AnthropicMessages {
                0
            } else {
                100
            },
        };
        assert_eq!(r.usage, expected, "{label}");
        assert!(r.usage_reported, "{label}");
    }
}

#[tokio::test]
async fn agt_2_chat_stream_usage_is_asked_for_and_its_absence_is_reported() {
    let server = ScriptedServer::start([
        Step::text("a").check(|b| {
            (b["stream_options"]["include_usage"] == true)
                .then_some(())
                .ok_or_else(|| "include_usage not asked".to_string())
        }),
        Step::text("b").check(|b| {
            b.get("stream_options")
                .is_none()
                .then_some(())
                .ok_or_else(|| "stream_options sent".to_string())
        }),
    ])
    .await
    .unwrap();
    let (c, _) = client(&server, WireFormat::OpenAiChat);
    let r = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap();
    assert!(r.usage_reported);
    // A server configured not to be asked (some compatible servers refuse
    // stream_options): no usage chunk comes, and the response says so
    // instead of reporting zero as if it were measured.
    let mut e = endpoint(&server, WireFormat::OpenAiChat);
    e.compat.stream_usage = false;
    let (c, _) = client_for(e);
    let r = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap();
    assert!(!r.usage_reported);
    assert_eq!(r.usage, Usage::default());
    assert_eq!(server.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn agt_2_cost_from_the_profile_price_table() {
    let priced = ModelProfile::from_toml(
        r#"
format = "openai-responses"
channel = "openai"
model = "gpt-test"
[prices]
input = 2.0
cached_input = 0.5
output = 8.0
reasoning = 8.0
"#,
    )
    .unwrap();
    let server = ScriptedServer::start([Step::text("x").usage(airlock_modeltest::Usage {
        input: 10_000,
        cached: 4_000,
        output: 2_000,
        reasoning: 500,
    })])
    .await
    .unwrap();
    let (c, _) = client(&server, WireFormat::OpenAiResponses);
    let r = c
        .complete(&request(opening(), true), &mut NoEvents)
        .await
        .unwrap();
    // 6000 × 2 + 4000 × 0.5 + 1500 × 8 + 500 × 8 = 12000 + 2000 + 12000 + 4000 µ$ = 0.03 $
    assert_eq!(priced.cost(&r.usage), Ok(Cost(30_000_000)));
    assert!((priced.cost(&r.usage).unwrap().usd() - 0.03).abs() < 1e-12);
    // A profile without prices cannot price anything, and says what is missing.
    let unpriced = ModelProfile::from_toml(
        "format = \"openai-responses\"\nchannel = \"openai\"\nmodel = \"m\"\n",
    )
    .unwrap();
    assert_eq!(
        unpriced.cost(&r.usage),
        Err(PriceUnknown {
            missing: vec!["input", "output"]
        })
    );
    assert!(unpriced.prices.known().is_err());
    assert!(priced.prices.known().is_ok());
}
