//! The three wire formats: translating a [`ModelRequest`] into a request
//! body, and a response body or event stream back into a
//! [`ModelResponse`]. Pure (no I/O), so each is tested and benchmarked on
//! bytes alone ([`encode_request`], [`decode_body`], [`decode_stream`]).
//!
//! Decoders never panic on provider bytes: every field is looked up, never
//! indexed; unknown events and fields are ignored; a missing required part
//! is an [`ModelError::InvalidResponse`]. They must not decide on their own
//! whether a call may run: they only record what the provider marked
//! complete, and [`crate::response`] applies the rule.

pub mod anthropic;
pub mod chat;
pub mod responses;

use serde_json::Value;

use crate::conversation::ModelRequest;
use crate::error::{ModelError, bound};
use crate::events::{EventSink, NoEvents};
use crate::profile::{Compat, WireFormat};
use crate::response::{ModelResponse, Usage};
use crate::sse::{SseDecoder, SseError};

/// What a tool result that is an error looks like on formats without an
/// error flag (Chat Completions, Responses).
pub const ERROR_RESULT_PREFIX: &str = "Error: ";

/// The request body for `format`, after validating the request.
pub fn encode_request(
    format: WireFormat,
    request: &ModelRequest,
    compat: &Compat,
) -> Result<Vec<u8>, ModelError> {
    request.validate()?;
    let body = match format {
        WireFormat::OpenAiChat => chat::encode(request, compat),
        WireFormat::OpenAiResponses => responses::encode(request),
        WireFormat::AnthropicMessages => anthropic::encode(request),
    };
    serde_json::to_vec(&body).map_err(|e| ModelError::InvalidResponse {
        format: "request",
        message: e.to_string(),
    })
}

fn format_name(format: WireFormat) -> &'static str {
    format.name()
}

pub(crate) fn invalid(format: WireFormat, message: impl Into<String>) -> ModelError {
    ModelError::InvalidResponse {
        format: format_name(format),
        message: bound(message.into()),
    }
}

pub(crate) fn parse_json(format: WireFormat, bytes: &[u8]) -> Result<Value, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let head = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]).into_owned();
        invalid(format, format!("not JSON ({e}); starts with {head:?}"))
    })
}

/// A whole (non-streamed) response body.
pub fn decode_body(
    format: WireFormat,
    body: &[u8],
    max_argument_bytes: usize,
) -> Result<ModelResponse, ModelError> {
    let v = parse_json(format, body)?;
    match format {
        WireFormat::OpenAiChat => chat::decode_body(&v, max_argument_bytes),
        WireFormat::OpenAiResponses => responses::decode_body(&v, max_argument_bytes),
        WireFormat::AnthropicMessages => anthropic::decode_body(&v, max_argument_bytes),
    }
}

/// A whole event stream at once (tests, benchmarks).
pub fn decode_stream(
    format: WireFormat,
    bytes: &[u8],
    max_argument_bytes: usize,
) -> Result<ModelResponse, ModelError> {
    let mut d = StreamDecoder::new(format, max_argument_bytes, bytes.len().max(1));
    d.push(bytes, &mut NoEvents)?;
    d.finish()
}

/// One format's event handling.
pub(crate) trait FormatStream: Send + std::fmt::Debug {
    /// Handles one event; answers true for the terminal event.
    fn event(&mut self, data: &str, sink: &mut dyn EventSink) -> Result<bool, ModelError>;
    /// The response, once the terminal event was seen.
    fn finish(self: Box<Self>) -> Result<ModelResponse, ModelError>;
}

/// Decodes an event stream chunk by chunk.
#[derive(Debug)]
pub struct StreamDecoder {
    format: WireFormat,
    sse: SseDecoder,
    inner: Box<dyn FormatStream>,
    done: bool,
}

impl StreamDecoder {
    pub fn new(format: WireFormat, max_argument_bytes: usize, max_event_bytes: usize) -> Self {
        let inner: Box<dyn FormatStream> = match format {
            WireFormat::OpenAiChat => Box::new(chat::Stream::new(max_argument_bytes)),
            WireFormat::OpenAiResponses => Box::new(responses::Stream::new(max_argument_bytes)),
            WireFormat::AnthropicMessages => Box::new(anthropic::Stream::new(max_argument_bytes)),
        };
        Self {
            format,
            sse: SseDecoder::new(max_event_bytes),
            inner,
            done: false,
        }
    }

    /// Feeds body bytes. Bytes after the terminal event are ignored.
    pub fn push(&mut self, bytes: &[u8], sink: &mut dyn EventSink) -> Result<(), ModelError> {
        if self.done {
            return Ok(());
        }
        let events = self.sse.push(bytes).map_err(|e| self.sse_error(e))?;
        for ev in events {
            if self.done {
                break;
            }
            if self.inner.event(&ev.data, sink)? {
                self.done = true;
            }
        }
        Ok(())
    }

    fn sse_error(&self, e: SseError) -> ModelError {
        match e {
            SseError::TooLarge(limit) => ModelError::TooLarge { limit },
            SseError::NotUtf8 => invalid(self.format, "the event stream is not UTF-8"),
        }
    }

    /// True once the terminal event was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The end of the body: the response, or [`ModelError::StreamCut`]
    /// when the terminal event never came.
    pub fn finish(mut self) -> Result<ModelResponse, ModelError> {
        if !self.done
            && let Some(ev) = self.sse.finish()
            && self.inner.event(&ev.data, &mut NoEvents)?
        {
            self.done = true;
        }
        if !self.done {
            return Err(ModelError::StreamCut);
        }
        self.inner.finish()
    }
}

/// Reads a JSON event (every format's `data:` is one JSON object, except
/// Chat's `[DONE]`, handled by its decoder).
pub(crate) fn event_json(format: WireFormat, data: &str) -> Result<Value, ModelError> {
    parse_json(format, data.as_bytes())
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub(crate) fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// `a.b` as u64 (0 when absent).
pub(crate) fn u64_in(v: &Value, outer: &str, key: &str) -> u64 {
    v.get(outer)
        .map(|o| u64_of(o, key).unwrap_or(0))
        .unwrap_or(0)
}

/// Arguments that a server sent as a JSON value instead of a string (some
/// Chat Completions servers do) become their JSON text.
pub(crate) fn arguments_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// An error kind a provider uses for failures worth retrying.
pub(crate) fn transient_kind(kind: &str) -> bool {
    let k = kind.to_ascii_lowercase();
    [
        "overloaded",
        "server_error",
        "api_error",
        "rate_limit",
        "internal",
        "unavailable",
        "timeout",
    ]
    .iter()
    .any(|t| k.contains(t))
}

/// The kind and message of a provider's error object (`{"error": {...}}`
/// for OpenAI, `{"type": "error", "error": {...}}` for Anthropic, or a bare
/// string).
pub(crate) fn error_parts(v: &Value) -> Option<(String, String)> {
    let e = v.get("error")?;
    match e {
        Value::Null => None,
        Value::String(s) => Some(("error".into(), s.clone())),
        Value::Object(_) => {
            let kind = str_of(e, "type")
                .or_else(|| str_of(e, "code"))
                .unwrap_or("error")
                .to_string();
            let message = str_of(e, "message").unwrap_or("").to_string();
            Some((kind, message))
        }
        other => Some(("error".into(), other.to_string())),
    }
}

/// An error event inside a stream (or an error object in a 200 body).
pub(crate) fn stream_error(kind: String, message: String) -> ModelError {
    ModelError::StreamError {
        retryable: transient_kind(&kind),
        kind: bound(kind),
        message: bound(message),
    }
}

/// The error of a non-success status, from its body (already scrubbed by
/// the caller).
pub fn status_error(
    status: u16,
    body: &[u8],
    retry_after: Option<std::time::Duration>,
) -> ModelError {
    let (kind, message) = match serde_json::from_slice::<Value>(body) {
        Ok(v) => match error_parts(&v) {
            Some((k, m)) => (Some(k), m),
            None => (None, v.to_string()),
        },
        Err(_) => (None, String::from_utf8_lossy(body).trim().to_string()),
    };
    ModelError::Status {
        status,
        kind: kind.map(bound),
        message: bound(message),
        retry_after,
    }
}

/// Sums usage the OpenAI way (Chat: `prompt_tokens`…, Responses:
/// `input_tokens`…).
pub(crate) fn openai_usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    let input = u64_of(u, "input_tokens").or_else(|| u64_of(u, "prompt_tokens"))?;
    let output = u64_of(u, "output_tokens")
        .or_else(|| u64_of(u, "completion_tokens"))
        .unwrap_or(0);
    let cached = u64_in(u, "input_tokens_details", "cached_tokens").max(u64_in(
        u,
        "prompt_tokens_details",
        "cached_tokens",
    ));
    let reasoning = u64_in(u, "output_tokens_details", "reasoning_tokens").max(u64_in(
        u,
        "completion_tokens_details",
        "reasoning_tokens",
    ));
    Some(Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        reasoning_tokens: reasoning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agt_2_provider_error_bodies() {
        let cases: &[(&str, Option<&str>, &str)] = &[
            (
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
                Some("requests"),
                "Rate limit reached",
            ),
            (
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                Some("overloaded_error"),
                "Overloaded",
            ),
            (
                r#"{"error":"model not found"}"#,
                Some("error"),
                "model not found",
            ),
            ("<html>bad gateway</html>", None, "<html>bad gateway</html>"),
            (r#"{"detail":"x"}"#, None, r#"{"detail":"x"}"#),
        ];
        for (body, kind, message) in cases {
            match status_error(502, body.as_bytes(), None) {
                ModelError::Status {
                    kind: k,
                    message: m,
                    ..
                } => {
                    assert_eq!(k.as_deref(), *kind, "{body}");
                    assert_eq!(m, *message, "{body}");
                }
                other => panic!("{other:?}"),
            }
        }
        let long = "x".repeat(10_000);
        let e = status_error(500, long.as_bytes(), None).to_string();
        assert!(e.len() < 1200, "bounded: {}", e.len());
        assert!(transient_kind("overloaded_error") && transient_kind("server_error"));
        assert!(!transient_kind("invalid_request_error"));
    }
}

#[cfg(test)]
mod samples;
