//! Model clients (AGT-2): one conversation type, three wire formats (OpenAI
//! Chat Completions, OpenAI Responses, Anthropic Messages), each with tool
//! calls and streaming, over the control process's reviewed outbound client.
//!
//! # How the harness uses it
//!
//! ```text
//! profile  = ModelProfile::from_toml(text)?                 // per workspace, validated
//! channel  = policy.channels.get(name)                      // operator's egress policy, trusted side
//! endpoint = ModelEndpoint::from_profile(&profile, channel) // Err(CredentialsMissing) → blocked,
//!                                                           //   provider_credentials_missing
//! client   = HttpModelClient::new(endpoint, outbound)       // Arc<dyn ModelClient> in the harness
//! loop {
//!     request = profile.request(messages.clone(), tools.clone())
//!     response = client.complete(&request, &mut sink).await?   // retries inside; scrubbed errors
//!     persist response (final items) before acting
//!     cost    = profile.cost(&response.usage)                  // Err(PriceUnknown) → refuse a cost budget
//!     messages.push(response.to_message())
//!     for call in response.tool_calls():
//!         match call.status {
//!             Ready { arguments } → pipeline (policy, approval, journal, dispatch) → one result
//!             InvalidArguments | Incomplete → Message::tool_error(id, call.error_for_model())
//!         }
//!     stop when response.stop_reason is EndTurn (or the run's own rules say so)
//! }
//! ```
//!
//! Before each request [`ModelRequest::validate`] checks the transcript
//! (each call has exactly one result, in order, before anything else):
//! the client refuses to send a malformed conversation.
//!
//! # What this crate must not do
//! Execute tool calls, decide policy, touch the store or the vault, print,
//! or hold a credential anywhere but [`ModelAuth`] (sensitive header value,
//! never `Debug`-printed). Secrets reach it already resolved.

pub mod client;
pub mod conversation;
pub mod error;
pub mod events;
pub mod profile;
pub mod response;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod wire;

pub use client::{
    EndpointError, HttpModelClient, ModelAuth, ModelClient, ModelEndpoint, ModelFuture,
    channel_client_options,
};
pub use conversation::{
    AssistantItem, CallRecord, ConversationError, Message, ModelRequest, ToolChoice,
    ToolDefinition, validate,
};
pub use error::ModelError;
pub use events::{EventSink, NoEvents, StreamEvent};
pub use profile::{
    CallLimits, Cost, Endpoint, ModelProfile, Price, PriceUnknown, Prices, ProfileError,
    RetryLimits, WireFormat,
};
pub use response::{
    ArgumentsError, CallStatus, ModelResponse, ProviderFailure, ResponseItem, StopReason, ToolCall,
    Usage,
};
pub use retry::{Clock, ManualClock, RetryPolicy, SystemClock};
pub use scripted::{ScriptedModelClient, ScriptedReply};
