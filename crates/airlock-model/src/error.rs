//! Why a model call failed, with a stable code per kind and the retry
//! classification in one place ([`ModelError::is_retryable`]).
//!
//! Every text in an error that came from the provider or the network is
//! bounded and passes [`ModelError::scrub`] (the credential in every
//! encoding `airlock-redact` knows) before the client returns it.

use std::time::Duration;

use crate::conversation::ConversationError;

/// Longest provider text kept in an error.
pub const MAX_ERROR_TEXT: usize = 1024;

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The request cannot be sent (bad conversation, tools or parameters).
    #[error("invalid model request: {0}")]
    Request(#[from] ConversationError),
    /// The endpoint cannot be used (URL refused, channel does not allow
    /// the path or method).
    #[error("model endpoint refused: {0}")]
    Endpoint(String),
    /// The provider answered with an error status.
    #[error("model provider answered {status}{}: {message}", kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default())]
    Status {
        status: u16,
        kind: Option<String>,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The provider reported an error inside a stream.
    #[error("model provider reported {kind}: {message}")]
    StreamError {
        kind: String,
        message: String,
        retryable: bool,
    },
    /// Connecting, TLS or the HTTP exchange failed.
    #[error("model transport failed ({reason}): {message}")]
    Transport {
        reason: &'static str,
        message: String,
    },
    /// A timeout: `response_head`, `stream_idle` or `deadline`.
    #[error("model request timed out waiting for the {0}")]
    Timeout(&'static str),
    /// The stream ended before its terminal event (`[DONE]`,
    /// `response.completed|incomplete|failed`, `message_stop`).
    #[error("model stream ended before its terminal event")]
    StreamCut,
    /// The response is larger than the ceiling.
    #[error("model response larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The provider's bytes are not the format's JSON or lack a required part.
    #[error("model response is not valid {format}: {message}")]
    InvalidResponse {
        format: &'static str,
        message: String,
    },
    /// Retrying stopped: the attempts or the total wait ran out.
    #[error("model request failed after {attempts} attempts: {last}")]
    RetriesExhausted {
        attempts: u32,
        last: Box<ModelError>,
    },
}

impl ModelError {
    /// A stable code for logs, events and run errors.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Request(_) => "model_request_invalid",
            Self::Endpoint(_) => "model_endpoint_refused",
            Self::Status { status: 429, .. } => "model_rate_limited",
            Self::Status {
                status: 401 | 403, ..
            } => "model_auth_failed",
            Self::Status { status, .. } if *status >= 500 => "model_provider_unavailable",
            Self::Status { .. } => "model_request_rejected",
            Self::StreamError { .. } => "model_stream_error",
            Self::Transport { .. } => "model_transport_failed",
            Self::Timeout(_) => "model_timeout",
            Self::StreamCut => "model_stream_cut",
            Self::TooLarge { .. } => "model_response_too_large",
            Self::InvalidResponse { .. } => "model_response_invalid",
            Self::RetriesExhausted { last, .. } => last.code(),
        }
    }

    /// True when the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            Self::StreamError { retryable, .. } => *retryable,
            Self::Transport { .. } | Self::Timeout(_) | Self::StreamCut => true,
            Self::Request(_)
            | Self::Endpoint(_)
            | Self::TooLarge { .. }
            | Self::InvalidResponse { .. }
            | Self::RetriesExhausted { .. } => false,
        }
    }

    /// The server's requested wait, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The same error with every credential form replaced by `[REDACTED]`
    /// in every text it carries.
    pub fn scrub(self, patterns: &airlock_redact::Patterns) -> Self {
        if patterns.is_empty() {
            return self;
        }
        let s = |t: String| scrub_text(&t, patterns);
        match self {
            Self::Request(e) => Self::Request(match e {
                ConversationError::Message { index, message } => ConversationError::Message {
                    index,
                    message: s(message),
                },
                ConversationError::Tool { name, message } => ConversationError::Tool {
                    name: s(name),
                    message: s(message),
                },
                ConversationError::Request(m) => ConversationError::Request(s(m)),
            }),
            Self::Endpoint(m) => Self::Endpoint(s(m)),
            Self::Status {
                status,
                kind,
                message,
                retry_after,
            } => Self::Status {
                status,
                kind: kind.map(s),
                message: s(message),
                retry_after,
            },
            Self::StreamError {
                kind,
                message,
                retryable,
            } => Self::StreamError {
                kind: s(kind),
                message: s(message),
                retryable,
            },
            Self::Transport { reason, message } => Self::Transport {
                reason,
                message: s(message),
            },
            Self::InvalidResponse { format, message } => Self::InvalidResponse {
                format,
                message: s(message),
            },
            Self::RetriesExhausted { attempts, last } => Self::RetriesExhausted {
                attempts,
                last: Box::new(last.scrub(patterns)),
            },
            e @ (Self::Timeout(_) | Self::StreamCut | Self::TooLarge { .. }) => e,
        }
    }
}

/// Replaces the credential in `text` (every encoding), then bounds it.
/// Scrubbing comes first: cutting first could leave half a key behind.
pub fn scrub_text(text: &str, patterns: &airlock_redact::Patterns) -> String {
    let clean = if patterns.is_empty() {
        text.to_string()
    } else {
        String::from_utf8_lossy(&patterns.redact(text.as_bytes())).into_owned()
    };
    bound(clean)
}

/// Cuts a text at [`MAX_ERROR_TEXT`] bytes on a character boundary.
pub fn bound(mut text: String) -> String {
    if text.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Maps an outbound client error.
pub(crate) fn from_client(e: airlock_egress::client::ClientError) -> ModelError {
    use airlock_egress::client::ClientError as C;
    match e {
        C::Timeout("response") => ModelError::Timeout("response_head"),
        C::Timeout("stream_idle") => ModelError::Timeout("stream_idle"),
        C::Timeout("request" | "deadline") => ModelError::Timeout("deadline"),
        C::Timeout(stage) => ModelError::Transport {
            reason: "timeout",
            message: format!("timed out during {stage}"),
        },
        C::TooLarge(limit) => ModelError::TooLarge { limit },
        C::Url(r) | C::Denied(r) => ModelError::Endpoint(r.to_string()),
        C::Dns(airlock_egress::ResolveError::NxDomain) => {
            ModelError::Endpoint("dns_nxdomain".to_string())
        }
        // A certificate that does not verify will not verify on a retry.
        C::Tls(m) => ModelError::Endpoint(bound(format!("tls: {m}"))),
        other => ModelError::Transport {
            reason: other.reason(),
            message: bound(other.to_string()),
        },
    }
}
