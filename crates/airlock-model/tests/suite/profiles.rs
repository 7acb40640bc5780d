//! From a workspace's model profile and the operator's egress policy to a
//! working client: the channel's upstream and credential are used, a
//! missing channel is `provider_credentials_missing`, a channel that does
//! not allow the format's request is refused.

use std::collections::HashMap;

use airlock_egress::ScriptedResolver;
use airlock_egress::client::ClientOptions;
use airlock_egress::client::OutboundClient;
use airlock_egress::policy::{Policy, SecretSource};
use airlock_model::{
    EndpointError, HttpModelClient, ModelClient, ModelEndpoint, ModelProfile, NoEvents,
    channel_client_options,
};
use airlock_modeltest::{ScriptedServer, Step};

use super::common::*;

const SECRET: &str = "key-for-the-scripted-model-9f8e7d6c5b";

#[derive(Debug)]
struct Vault(HashMap<String, String>);

impl SecretSource for Vault {
    fn get(&self, reference: &str) -> Option<String> {
        self.0.get(reference).cloned()
    }
}

fn policy(port: u16, extra: &str) -> Policy {
    let text = format!(
        "[channels.llm]\nupstream = \"http://127.0.0.1:{port}\"\nheader = \"x-api-key\"\nvalue = \"${{secret:LLM_KEY}}\"\ninsecure_upstream_for_tests = true\n{extra}"
    );
    let vault = Vault(HashMap::from([(
        "secret:LLM_KEY".to_string(),
        SECRET.to_string(),
    )]));
    Policy::from_toml(&text, &vault).unwrap()
}

fn profile(format: &str) -> ModelProfile {
    ModelProfile::from_toml(&format!(
        "format = \"{format}\"\nchannel = \"llm\"\nmodel = \"scripted-model\"\nmax_output_tokens = 100\n[limits]\nmax_attempts = 2\n"
    ))
    .unwrap()
}

#[tokio::test]
async fn agt_2_a_channel_profile_reaches_the_model_with_the_channels_credential() {
    for format in ["openai-chat", "openai-responses", "anthropic-messages"] {
        let server = ScriptedServer::start_with_auth(
            [Step::text("hi from the channel")],
            "x-api-key",
            SECRET,
        )
        .await
        .unwrap();
        let policy = policy(server.addr().port(), "");
        let channel = policy.channels.get("llm");
        let p = profile(format);
        let endpoint = ModelEndpoint::from_profile(&p, channel).unwrap();
        assert_eq!(endpoint.base_url(), server.base_url());
        assert_eq!(
            endpoint.retry.limits.max_attempts, 2,
            "the profile's limits are used"
        );
        assert!(!format!("{endpoint:?}").contains(SECRET));
        // The channel's upstream is the operator's: its loopback address
        // and plain HTTP are allowed for it, and only because of it.
        let opts = channel_client_options(channel.unwrap(), ClientOptions::default());
        let transport = OutboundClient::new(std::sync::Arc::new(ScriptedResolver::new()), opts);
        let c = HttpModelClient::new(endpoint.clone(), transport);
        let r = c
            .complete(&p.request(opening(), tools()), &mut NoEvents)
            .await
            .unwrap();
        assert_eq!(r.text(), "hi from the channel");
        assert_eq!(server.violations(), Vec::<String>::new(), "{format}");
        let sent = &server.requests()[0];
        assert_eq!(sent.body["model"], "scripted-model");
        // Positive control: the default options refuse the same upstream.
        let strict = OutboundClient::new(
            std::sync::Arc::new(ScriptedResolver::new()),
            ClientOptions::default(),
        );
        let e = HttpModelClient::new(endpoint, strict)
            .complete(&p.request(opening(), tools()), &mut NoEvents)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "model_endpoint_refused", "{e}");
    }
}

#[tokio::test]
async fn agt_2_profile_to_endpoint_refusals() {
    let p = profile("anthropic-messages");
    // No such channel (or its secret is not set): the harness blocks the
    // run with provider_credentials_missing.
    assert_eq!(
        ModelEndpoint::from_profile(&p, None).unwrap_err(),
        EndpointError::CredentialsMissing("llm".into())
    );
    let get_only = policy(9, "methods = [\"GET\"]\n");
    assert!(matches!(
        ModelEndpoint::from_profile(&p, get_only.channels.get("llm")),
        Err(EndpointError::ChannelRefuses { .. })
    ));
    let other_path = policy(9, "paths = [\"/v1/chat/\"]\n");
    let e = ModelEndpoint::from_profile(&p, other_path.channels.get("llm")).unwrap_err();
    assert!(
        e.to_string().contains("/v1/messages is outside its paths"),
        "{e}"
    );
    // Positive control: the same path rule suits the Chat format.
    assert!(
        ModelEndpoint::from_profile(&profile("openai-chat"), other_path.channels.get("llm"))
            .is_ok()
    );
    // A keyless base_url profile needs no channel.
    let local = ModelProfile::from_toml(
        "format = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let e = ModelEndpoint::from_profile(&local, None).unwrap();
    assert_eq!(e.url(), "http://127.0.0.1:8080/v1/chat/completions");
    assert!(e.auth.is_none());
}
