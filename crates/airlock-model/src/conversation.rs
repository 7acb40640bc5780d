//! The one conversation type every wire format is translated from: the
//! messages of a run so far, the tools the model may call, and the request
//! built from them.
//!
//! The ordering rule is the strictest of the three providers, so a
//! conversation that passes [`validate`] translates correctly into each:
//! after an assistant turn with tool calls come exactly one result per
//! call, in the order of the calls, before anything else (user text may
//! follow the results). This module must not know any wire format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions. Anthropic and Responses take them out of the message
    /// list (`system`, `instructions`): all system texts are joined there,
    /// in order. Chat Completions keeps them in place.
    System {
        text: String,
    },
    User {
        text: String,
    },
    /// A model turn as it was answered: text and tool calls, in order.
    Assistant {
        items: Vec<AssistantItem>,
    },
    /// The answer to one tool call, matched by the call's id.
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// A part of an assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AssistantItem {
    Text { text: String },
    ToolCall(CallRecord),
}

/// A tool call as it stays in the conversation: the raw argument text the
/// model produced (kept verbatim, even when it did not parse, so the
/// transcript shows what the model said).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Self::System { text: text.into() }
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::User { text: text.into() }
    }
    /// A successful tool result.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        }
    }
    /// A failed tool result (a refusal, a denial, invalid arguments, an
    /// error of the tool): the model sees it marked as an error.
    pub fn tool_error(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: true,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// `^[A-Za-z0-9_-]{1,64}$` (what every provider accepts).
    pub name: String,
    pub description: String,
    /// A JSON Schema whose top level is `{"type": "object", …}`.
    pub parameters: Value,
}

/// Whether and how the model must call tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call at least one tool.
    Required,
    /// The model may not call tools (they are still described).
    None,
}

/// One request to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The provider's model id.
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    pub tool_choice: ToolChoice,
    /// `None`: the provider's default.
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: u32,
    /// `None`: not sent (reasoning models refuse the parameter).
    pub temperature: Option<f32>,
    /// Ask for a streamed response (the result is the same either way).
    pub stream: bool,
}

impl ModelRequest {
    /// A streaming request with the provider's defaults.
    pub fn new(model: impl Into<String>, max_output_tokens: u32) -> Self {
        Self {
            model: model.into(),
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: None,
            max_output_tokens,
            temperature: None,
            stream: true,
        }
    }
}

/// Why a conversation or request cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversationError {
    #[error("message {index}: {message}")]
    Message { index: usize, message: String },
    #[error("tool {name:?}: {message}")]
    Tool { name: String, message: String },
    #[error("request: {0}")]
    Request(String),
}

/// Checks that a conversation can be sent to any provider: tool calls
/// answered once each, in order, before anything else; no result without
/// its call; unique call ids; no empty conversation or trailing assistant
/// turn with open calls.
pub fn validate(messages: &[Message]) -> Result<(), ConversationError> {
    let err = |index: usize, message: String| ConversationError::Message { index, message };
    if !messages
        .iter()
        .any(|m| matches!(m, Message::User { .. } | Message::ToolResult { .. }))
    {
        return Err(ConversationError::Request(
            "the conversation has no user message".into(),
        ));
    }
    let mut seen_ids = std::collections::HashSet::new();
    // Calls of the last assistant turn still waiting for their result, in order.
    let mut open: std::collections::VecDeque<&str> = std::collections::VecDeque::new();
    for (index, m) in messages.iter().enumerate() {
        match m {
            Message::ToolResult { call_id, .. } => match open.pop_front() {
                Some(expected) if expected == call_id => {}
                Some(expected) => {
                    return Err(err(
                        index,
                        format!("result for {call_id:?} where the result for {expected:?} is due"),
                    ));
                }
                None => {
                    return Err(err(
                        index,
                        format!("result for {call_id:?} answers no open tool call"),
                    ));
                }
            },
            other => {
                if let Some(expected) = open.front() {
                    return Err(err(
                        index,
                        format!("tool call {expected:?} has no result before this message"),
                    ));
                }
                if let Message::Assistant { items } = other {
                    for item in items {
                        if let AssistantItem::ToolCall(c) = item {
                            if c.id.is_empty() {
                                return Err(err(index, "a tool call has an empty id".into()));
                            }
                            if !seen_ids.insert(c.id.as_str()) {
                                return Err(err(
                                    index,
                                    format!("tool call id {:?} is used twice", c.id),
                                ));
                            }
                            open.push_back(c.id.as_str());
                        }
                    }
                }
            }
        }
    }
    if let Some(expected) = open.front() {
        return Err(ConversationError::Message {
            index: messages.len(),
            message: format!("tool call {expected:?} has no result"),
        });
    }
    Ok(())
}

/// True for a tool name every provider accepts.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ModelRequest {
    /// Checks the request before it is translated: the conversation
    /// ([`validate`]), the tools (names, object schemas, no duplicates) and
    /// the parameters.
    pub fn validate(&self) -> Result<(), ConversationError> {
        if self.model.is_empty()
            || self.model.len() > 256
            || self.model.chars().any(char::is_control)
        {
            return Err(ConversationError::Request(
                "the model id must be 1 to 256 printable characters".into(),
            ));
        }
        if self.max_output_tokens == 0 {
            return Err(ConversationError::Request(
                "max_output_tokens must be at least 1".into(),
            ));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(ConversationError::Request(
                "temperature must be between 0 and 2".into(),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tools {
            let tool_err = |message: &str| ConversationError::Tool {
                name: t.name.clone(),
                message: message.to_string(),
            };
            if !valid_tool_name(&t.name) {
                return Err(tool_err("names are 1 to 64 letters, digits, '_' or '-'"));
            }
            if !names.insert(t.name.as_str()) {
                return Err(tool_err("defined twice"));
            }
            if t.parameters.get("type").and_then(Value::as_str) != Some("object") {
                return Err(tool_err(
                    "parameters must be a JSON Schema with \"type\": \"object\"",
                ));
            }
        }
        if self.tool_choice == ToolChoice::Required && self.tools.is_empty() {
            return Err(ConversationError::Request(
                "tool_choice required needs at least one tool".into(),
            ));
        }
        validate(&self.messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> AssistantItem {
        AssistantItem::ToolCall(CallRecord {
            id: id.into(),
            name: "run_command".into(),
            arguments: "{}".into(),
        })
    }

    fn assistant(items: Vec<AssistantItem>) -> Message {
        Message::Assistant { items }
    }

    #[test]
    fn agt_2_conversation_ordering_rules() {
        let ok = |m: Vec<Message>| validate(&m).map_err(|e| e.to_string());
        let base = || vec![Message::system("be brief"), Message::user("hi")];
        // Positive controls: well-formed conversations pass.
        let mut good = base();
        good.push(assistant(vec![
            AssistantItem::Text { text: "ok".into() },
            call("a"),
            call("b"),
        ]));
        good.push(Message::tool_result("a", "1"));
        good.push(Message::tool_error("b", "denied"));
        good.push(Message::user("and now?"));
        assert_eq!(ok(good.clone()), Ok(()));
        let mut plain = base();
        plain.push(assistant(vec![AssistantItem::Text { text: "x".into() }]));
        assert_eq!(ok(plain), Ok(()));

        let cases: Vec<(&str, Vec<Message>, &str)> = vec![
            (
                "missing result",
                {
                    let mut m = base();
                    m.push(assistant(vec![call("a"), call("b")]));
                    m.push(Message::tool_result("a", "1"));
                    m
                },
                "tool call \"b\" has no result",
            ),
            (
                "results out of order",
                {
                    let mut m = base();
                    m.push(assistant(vec![call("a"), call("b")]));
                    m.push(Message::tool_result("b", "1"));
                    m.push(Message::tool_result("a", "1"));
                    m
                },
                "where the result for \"a\" is due",
            ),
            (
                "user text before the results",
                {
                    let mut m = base();
                    m.push(assistant(vec![call("a")]));
                    m.push(Message::user("wait"));
                    m.push(Message::tool_result("a", "1"));
                    m
                },
                "has no result before this message",
            ),
            (
                "result twice",
                {
                    let mut m = base();
                    m.push(assistant(vec![call("a")]));
                    m.push(Message::tool_result("a", "1"));
                    m.push(Message::tool_result("a", "1"));
                    m
                },
                "answers no open tool call",
            ),
            (
                "result without a call",
                {
                    let mut m = base();
                    m.push(Message::tool_result("zz", "1"));
                    m
                },
                "answers no open tool call",
            ),
            (
                "duplicate call id across turns",
                {
                    let mut m = base();
                    m.push(assistant(vec![call("a")]));
                    m.push(Message::tool_result("a", "1"));
                    m.push(assistant(vec![call("a")]));
                    m.push(Message::tool_result("a", "1"));
                    m
                },
                "used twice",
            ),
            (
                "no user message",
                vec![Message::system("s")],
                "no user message",
            ),
        ];
        for (name, messages, want) in cases {
            let e = ok(messages).expect_err(name);
            assert!(e.contains(want), "{name}: {e}");
        }
    }

    type Change = Box<dyn Fn(&mut ModelRequest)>;

    #[test]
    fn agt_2_request_checks_tools_and_parameters() {
        let good = || {
            let mut r = ModelRequest::new("m", 100);
            r.messages = vec![Message::user("hi")];
            r.tools = vec![ToolDefinition {
                name: "read_file".into(),
                description: "reads".into(),
                parameters: serde_json::json!({"type": "object", "properties": {}}),
            }];
            r
        };
        assert_eq!(good().validate(), Ok(()));
        let cases: Vec<(&str, Change)> = vec![
            (
                "bad name",
                Box::new(|r| r.tools[0].name = "read file".into()),
            ),
            ("long name", Box::new(|r| r.tools[0].name = "x".repeat(65))),
            (
                "schema not object",
                Box::new(|r| r.tools[0].parameters = serde_json::json!({"type": "string"})),
            ),
            (
                "duplicate",
                Box::new(|r| {
                    let t = r.tools[0].clone();
                    r.tools.push(t)
                }),
            ),
            ("zero tokens", Box::new(|r| r.max_output_tokens = 0)),
            ("temperature", Box::new(|r| r.temperature = Some(f32::NAN))),
            ("empty model", Box::new(|r| r.model.clear())),
            (
                "required without tools",
                Box::new(|r| {
                    r.tools.clear();
                    r.tool_choice = ToolChoice::Required
                }),
            ),
        ];
        for (name, change) in cases {
            let mut r = good();
            change(&mut r);
            assert!(r.validate().is_err(), "{name} was accepted");
        }
    }
}
