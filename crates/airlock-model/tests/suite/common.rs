//! Shared set-up: a client for a scripted server, tools, conversations.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_egress::ScriptedResolver;
use airlock_egress::client::{ClientOptions, OutboundClient};
use airlock_egress::policy::Cidr;
use airlock_model::{
    HttpModelClient, ManualClock, Message, ModelEndpoint, ModelError, ModelRequest, ModelResponse,
    StreamEvent, ToolDefinition, WireFormat,
};
use airlock_modeltest::ScriptedServer;
use serde_json::json;

pub const ALL: [WireFormat; 3] = WireFormat::ALL;

/// Every format, streamed and not.
pub fn modes() -> Vec<(WireFormat, bool)> {
    ALL.iter().flat_map(|f| [(*f, true), (*f, false)]).collect()
}

/// The outbound client, allowed to reach the loopback server over plain
/// HTTP (explicitly: by default both are refused).
pub fn transport() -> OutboundClient {
    OutboundClient::new(
        Arc::new(ScriptedResolver::new()),
        ClientOptions {
            allow_plain_http: true,
            allowed_private: vec![Cidr::parse("127.0.0.1/32").unwrap()],
            ..ClientOptions::default()
        },
    )
}

/// A fixed wall clock for retry-after dates.
pub fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

pub fn endpoint(server: &ScriptedServer, format: WireFormat) -> ModelEndpoint {
    ModelEndpoint::new(format, &server.base_url()).unwrap()
}

/// A client with a manual clock (retries wait for nothing; waits are recorded).
pub fn client_for(endpoint: ModelEndpoint) -> (HttpModelClient, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(now(), 0.0));
    let c = HttpModelClient::new(endpoint, transport()).with_clock(clock.clone());
    (c, clock)
}

pub fn client(server: &ScriptedServer, format: WireFormat) -> (HttpModelClient, Arc<ManualClock>) {
    client_for(endpoint(server, format))
}

pub fn tools() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition {
            name: "read_file".into(),
            description: "Read a file of the work directory".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolDefinition {
            name: "run_command".into(),
            description: "Run a command".into(),
            parameters: json!({"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string"}}}}),
        },
    ]
}

pub fn request(messages: Vec<Message>, stream: bool) -> ModelRequest {
    let mut r = ModelRequest::new("scripted-model", 256);
    r.messages = messages;
    r.tools = tools();
    r.stream = stream;
    r
}

pub fn opening() -> Vec<Message> {
    vec![
        Message::system("You are a careful agent."),
        Message::user("What does a.txt say?"),
    ]
}

/// Sends a request, collecting progress events.
pub async fn send(
    c: &HttpModelClient,
    r: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
    use airlock_model::ModelClient;
    let mut events = Vec::new();
    let mut sink = |e: StreamEvent| events.push(e);
    let out = c.complete(r, &mut sink).await;
    (out, events)
}
