//! The normalized answer of a model, whatever the wire format: final
//! assistant items (text and tool calls), why the model stopped, and the
//! tokens it used.
//!
//! The rule that matters most lives here (`Builder::finish`): a tool
//! call is [`CallStatus::Ready`] only when the provider marked that call
//! complete **and** the response as a whole ended normally (end of turn or
//! tool calls). A call cut by a token limit, or part of an incomplete or
//! failed response, is [`CallStatus::Incomplete`] and must never be
//! executed; arguments that are not a JSON object are
//! [`CallStatus::InvalidArguments`], which the harness answers with an
//! error result.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conversation::{AssistantItem, CallRecord, Message};

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The turn is over (`stop`, `end_turn`, `stop_sequence`, a completed
    /// response without calls).
    EndTurn,
    /// The model asked for tool calls.
    ToolCalls,
    /// The output token limit cut the answer (`length`, `max_tokens`,
    /// `max_output_tokens`).
    MaxTokens,
    /// The provider's content filter or a refusal ended the answer.
    ContentFilter,
    /// The response ended early for another reason (incomplete, paused,
    /// context window exceeded, no finish reason).
    Incomplete,
    /// The provider reported the response as failed.
    Error,
}

impl StopReason {
    /// Stable lower-case code (for events and the journal).
    pub fn code(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolCalls => "tool_calls",
            Self::MaxTokens => "max_tokens",
            Self::ContentFilter => "content_filter",
            Self::Incomplete => "incomplete",
            Self::Error => "error",
        }
    }

    /// True when the response ended normally, so its complete calls may run.
    pub fn is_normal(self) -> bool {
        matches!(self, Self::EndTurn | Self::ToolCalls)
    }
}

/// Token counts of one response. `input_tokens` includes the cached ones,
/// `output_tokens` includes the reasoning ones (as OpenAI reports them;
/// Anthropic's counts are converted: its input excludes cache reads and
/// cache writes, which are added back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds another response's counts (saturating).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Input plus output.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Why a call's arguments cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArgumentsError {
    #[error("arguments are not valid JSON: {message}")]
    NotJson { message: String },
    #[error("arguments must be a JSON object, got {found}")]
    NotAnObject { found: String },
    #[error("arguments are larger than {limit} bytes")]
    TooLarge { limit: usize },
}

/// Whether a tool call may be executed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallStatus {
    /// Complete, in a normally ended response, with object arguments: may
    /// go to the pipeline.
    Ready { arguments: Map<String, Value> },
    /// Complete, but its arguments are unusable: answer it with an error
    /// result ([`ToolCall::error_for_model`]); execute nothing.
    InvalidArguments { error: ArgumentsError },
    /// Not marked complete by the provider, or part of a response that did
    /// not end normally (cut by a token limit, incomplete, failed): never
    /// execute it.
    Incomplete { reason: StopReason },
}

/// A tool call of a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id (`call_id` for Responses, `tool_use` id for
    /// Anthropic). When a provider sends none, one is made up
    /// (`call_airlock_N`).
    pub id: String,
    pub name: String,
    /// The argument text as the provider sent it (at most the argument
    /// ceiling; longer text is cut and the call marked too large).
    pub arguments: String,
    pub status: CallStatus,
}

impl ToolCall {
    /// The arguments when the call may be executed.
    pub fn ready(&self) -> Option<&Map<String, Value>> {
        match &self.status {
            CallStatus::Ready { arguments } => Some(arguments),
            _ => None,
        }
    }

    /// The error result to send back for a call that will not run, or
    /// `None` for a ready call. Every call in a transcript needs exactly
    /// one result, so the harness answers non-ready calls with this text
    /// (as an error result) unless it ends the run instead.
    pub fn error_for_model(&self) -> Option<String> {
        match &self.status {
            CallStatus::Ready { .. } => None,
            CallStatus::InvalidArguments { error } => Some(format!(
                "tool call not executed: {error}; call {} again with a JSON object of arguments",
                self.name
            )),
            CallStatus::Incomplete {
                reason: StopReason::MaxTokens,
            } => Some(
                "tool call not executed: your answer was cut by the output token limit before \
                 the call was complete"
                    .to_string(),
            ),
            CallStatus::Incomplete { reason } => Some(format!(
                "tool call not executed: the response ended early ({})",
                reason.code()
            )),
        }
    }

    /// The call as it stays in the conversation.
    pub fn record(&self) -> CallRecord {
        CallRecord {
            id: self.id.clone(),
            name: self.name.clone(),
            arguments: self.arguments.clone(),
        }
    }
}

/// A part of a response, in the order the model produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseItem {
    Text { text: String },
    ToolCall(ToolCall),
}

/// A failure the provider reported inside a response (scrubbed, bounded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderFailure {
    pub kind: String,
    pub message: String,
}

/// A model's complete answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub items: Vec<ResponseItem>,
    pub stop_reason: StopReason,
    /// The provider's own word for the stop (`length`, `max_output_tokens`, …).
    pub provider_stop: Option<String>,
    /// What the final attempt used. Attempts that failed (a cut stream, a
    /// 5xx) may have been billed too, but report nothing.
    pub usage: Usage,
    /// False when the provider sent no usage at all (some compatible servers
    /// do not while streaming): the counts are then zero, not measured.
    pub usage_reported: bool,
    pub response_id: Option<String>,
    /// The model id the provider says answered.
    pub model: Option<String>,
    /// Set when `stop_reason` is [`StopReason::Error`].
    pub failure: Option<ProviderFailure>,
    /// Requests it took (1 without retries).
    pub attempts: u32,
}

impl ModelResponse {
    /// All text items joined.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for i in &self.items {
            if let ResponseItem::Text { text } = i {
                out.push_str(text);
            }
        }
        out
    }

    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.items.iter().filter_map(|i| match i {
            ResponseItem::ToolCall(c) => Some(c),
            ResponseItem::Text { .. } => None,
        })
    }

    /// The assistant turn to append to the conversation: every text and
    /// every call (ready or not; each call then needs one result).
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            items: self
                .items
                .iter()
                .map(|i| match i {
                    ResponseItem::Text { text } => AssistantItem::Text { text: text.clone() },
                    ResponseItem::ToolCall(c) => AssistantItem::ToolCall(c.record()),
                })
                .collect(),
        }
    }
}

/// Parses argument text into an object. Empty text means "no arguments"
/// (`{}`): providers send that for tools without parameters.
pub fn parse_arguments(raw: &str) -> Result<Map<String, Value>, ArgumentsError> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ArgumentsError::NotAnObject {
            found: match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
            .to_string(),
        }),
        Err(e) => Err(ArgumentsError::NotJson {
            message: e.to_string(),
        }),
    }
}

/// A call being assembled from a stream or a body.
#[derive(Debug, Default)]
pub(crate) struct CallBuilder {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub too_large: bool,
    /// The provider marked this call complete.
    pub complete: bool,
}

#[derive(Debug)]
pub(crate) enum Slot {
    Text(String),
    Call(CallBuilder),
}

/// Accumulates items while a response is read; every decoder ends in
/// [`Builder::finish`], so the execution rule is applied in one place.
#[derive(Debug)]
pub(crate) struct Builder {
    pub slots: Vec<Slot>,
    pub usage: Option<Usage>,
    pub response_id: Option<String>,
    pub model: Option<String>,
    max_argument_bytes: usize,
}

impl Builder {
    pub fn new(max_argument_bytes: usize) -> Self {
        Self {
            slots: Vec::new(),
            usage: None,
            response_id: None,
            model: None,
            max_argument_bytes,
        }
    }

    /// Appends text to the last text slot, or opens one.
    pub fn push_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(Slot::Text(t)) = self.slots.last_mut() {
            t.push_str(text);
        } else {
            self.slots.push(Slot::Text(text.to_string()));
        }
    }

    /// Opens a text slot at a fixed position (for formats that number
    /// their items) and answers its index.
    pub fn open_text(&mut self) -> usize {
        self.slots.push(Slot::Text(String::new()));
        self.slots.len() - 1
    }

    pub fn open_call(&mut self, id: &str, name: &str) -> usize {
        self.slots.push(Slot::Call(CallBuilder {
            id: id.to_string(),
            name: name.to_string(),
            ..CallBuilder::default()
        }));
        self.slots.len() - 1
    }

    pub fn text_at(&mut self, slot: usize, text: &str) {
        if let Some(Slot::Text(t)) = self.slots.get_mut(slot) {
            t.push_str(text);
        }
    }

    /// Replaces a text slot's content with the provider's final text.
    pub fn set_text(&mut self, slot: usize, text: &str) {
        if let Some(Slot::Text(t)) = self.slots.get_mut(slot) {
            t.clear();
            t.push_str(text);
        }
    }

    pub fn call_mut(&mut self, slot: usize) -> Option<&mut CallBuilder> {
        match self.slots.get_mut(slot) {
            Some(Slot::Call(c)) => Some(c),
            _ => None,
        }
    }

    /// Appends an argument fragment, bounded by the argument ceiling.
    pub fn append_arguments(&mut self, slot: usize, fragment: &str) {
        let max = self.max_argument_bytes;
        if let Some(c) = self.call_mut(slot) {
            append_bounded(c, fragment, max);
        }
    }

    /// Replaces a call's arguments with the provider's final text.
    pub fn set_arguments(&mut self, slot: usize, full: &str) {
        let max = self.max_argument_bytes;
        if let Some(c) = self.call_mut(slot) {
            c.arguments.clear();
            c.too_large = false;
            append_bounded(c, full, max);
        }
    }

    /// Applies the execution rule and produces the response.
    pub fn finish(
        self,
        stop: StopReason,
        provider_stop: Option<String>,
        failure: Option<ProviderFailure>,
    ) -> ModelResponse {
        let has_complete_call = self
            .slots
            .iter()
            .any(|s| matches!(s, Slot::Call(c) if c.complete));
        // A normal stop with calls is a tool-call stop, whatever word the
        // provider used (some compatible servers say `stop`).
        let stop = if stop == StopReason::EndTurn && has_complete_call {
            StopReason::ToolCalls
        } else {
            stop
        };
        let mut next_id = 0usize;
        let items = self
            .slots
            .into_iter()
            .filter_map(|s| match s {
                Slot::Text(t) if t.is_empty() => None,
                Slot::Text(text) => Some(ResponseItem::Text { text }),
                Slot::Call(c) => {
                    let status = if !(c.complete && stop.is_normal()) {
                        CallStatus::Incomplete {
                            reason: if stop.is_normal() {
                                StopReason::Incomplete
                            } else {
                                stop
                            },
                        }
                    } else if c.too_large {
                        CallStatus::InvalidArguments {
                            error: ArgumentsError::TooLarge {
                                limit: self.max_argument_bytes,
                            },
                        }
                    } else {
                        match parse_arguments(&c.arguments) {
                            Ok(arguments) => CallStatus::Ready { arguments },
                            Err(error) => CallStatus::InvalidArguments { error },
                        }
                    };
                    let id = if c.id.is_empty() {
                        next_id += 1;
                        format!("call_airlock_{next_id}")
                    } else {
                        c.id
                    };
                    Some(ResponseItem::ToolCall(ToolCall {
                        id,
                        name: c.name,
                        arguments: c.arguments,
                        status,
                    }))
                }
            })
            .collect();
        ModelResponse {
            items,
            stop_reason: stop,
            provider_stop,
            usage_reported: self.usage.is_some(),
            usage: self.usage.unwrap_or_default(),
            response_id: self.response_id,
            model: self.model,
            failure,
            attempts: 1,
        }
    }
}

fn append_bounded(c: &mut CallBuilder, fragment: &str, max: usize) {
    if c.too_large {
        return;
    }
    let room = max.saturating_sub(c.arguments.len());
    if fragment.len() <= room {
        c.arguments.push_str(fragment);
    } else {
        let mut cut = room;
        while cut > 0 && !fragment.is_char_boundary(cut) {
            cut -= 1;
        }
        c.arguments.push_str(fragment.get(..cut).unwrap_or(""));
        c.too_large = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_call(complete: bool, args: &str, stop: StopReason) -> ToolCall {
        let mut b = Builder::new(64);
        let s = b.open_call("c1", "f");
        b.append_arguments(s, args);
        if let Some(c) = b.call_mut(s) {
            c.complete = complete;
        }
        let r = b.finish(stop, None, None);
        r.tool_calls().next().cloned().expect("one call")
    }

    #[test]
    fn agt_2_execution_rule_table() {
        use CallStatus as S;
        let ready = |c: &ToolCall| matches!(c.status, S::Ready { .. });
        // (complete, args, stop) → expected status kind
        let cases: &[(bool, &str, StopReason, &str)] = &[
            (true, r#"{"a":1}"#, StopReason::ToolCalls, "ready"),
            (true, r#"{"a":1}"#, StopReason::EndTurn, "ready"),
            (true, "", StopReason::ToolCalls, "ready"),
            (false, r#"{"a":1}"#, StopReason::ToolCalls, "incomplete"),
            (true, r#"{"a":1}"#, StopReason::MaxTokens, "incomplete"),
            (true, r#"{"a":1}"#, StopReason::Incomplete, "incomplete"),
            (true, r#"{"a":1}"#, StopReason::Error, "incomplete"),
            (true, r#"{"a":1}"#, StopReason::ContentFilter, "incomplete"),
            (true, r#"{"a":"#, StopReason::ToolCalls, "invalid"),
            (true, "not json", StopReason::ToolCalls, "invalid"),
            (true, "[1,2]", StopReason::ToolCalls, "invalid"),
            (true, "null", StopReason::ToolCalls, "invalid"),
            (true, &"x".repeat(65), StopReason::ToolCalls, "invalid"),
        ];
        for (complete, args, stop, want) in cases {
            let c = one_call(*complete, args, *stop);
            let got = match &c.status {
                S::Ready { .. } => "ready",
                S::InvalidArguments { .. } => "invalid",
                S::Incomplete { .. } => "incomplete",
            };
            assert_eq!(got, *want, "{complete} {args:?} {stop:?}: {c:?}");
            assert_eq!(ready(&c), c.error_for_model().is_none());
        }
        let cut = one_call(true, "{}", StopReason::MaxTokens);
        assert!(
            cut.error_for_model()
                .is_some_and(|m| m.contains("output token limit"))
        );
        let big = one_call(true, &"x".repeat(100), StopReason::ToolCalls);
        assert_eq!(big.arguments.len(), 64, "argument text is bounded");
        assert_eq!(
            big.status,
            S::InvalidArguments {
                error: ArgumentsError::TooLarge { limit: 64 }
            }
        );
    }

    #[test]
    fn agt_2_argument_ceiling_cuts_on_a_character_boundary() {
        let mut c = CallBuilder::default();
        append_bounded(&mut c, "ééé", 3);
        assert_eq!(c.arguments, "é");
        assert!(c.too_large);
    }
}
