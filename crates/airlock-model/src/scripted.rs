//! An in-process [`ModelClient`] that answers from a script and records
//! every request: for harness tests that need no HTTP at all. (Tests that
//! need the real client against a real server use `airlock-modeltest`.)
//!
//! Replies are built through the same rule as real responses
//! ([`crate::response`]), so a scripted call cut by the token limit is not
//! ready, exactly as a real one would be.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::client::{ModelClient, ModelFuture};
use crate::conversation::ModelRequest;
use crate::error::ModelError;
use crate::events::{EventSink, StreamEvent};
use crate::response::{Builder, ModelResponse, StopReason, Usage};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum ScriptedReply {
    Response(ModelResponse),
    Error(ModelError),
}

impl ScriptedReply {
    /// A final text answer.
    pub fn text(text: &str) -> Self {
        let mut b = Builder::new(usize::MAX);
        b.push_text(text);
        Self::Response(b.finish(StopReason::EndTurn, Some("scripted".into()), None))
    }

    /// Tool calls `(id, name, argument text)`, each marked complete, ended
    /// with `stop` (use [`StopReason::MaxTokens`] for a cut answer).
    pub fn calls(calls: &[(&str, &str, &str)], stop: StopReason) -> Self {
        let mut b = Builder::new(1 << 20);
        for (id, name, args) in calls {
            let slot = b.open_call(id, name);
            b.set_arguments(slot, args);
            if let Some(c) = b.call_mut(slot) {
                c.complete = true;
            }
        }
        Self::Response(b.finish(stop, Some("scripted".into()), None))
    }

    /// The same reply with usage counts.
    pub fn with_usage(self, usage: Usage) -> Self {
        match self {
            Self::Response(mut r) => {
                r.usage = usage;
                r.usage_reported = true;
                Self::Response(r)
            }
            e => e,
        }
    }
}

/// A fake model client.
#[derive(Debug, Default)]
pub struct ScriptedModelClient {
    replies: Mutex<VecDeque<ScriptedReply>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedModelClient {
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        Self {
            replies: Mutex::new(replies.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Replies not yet used.
    pub fn remaining(&self) -> usize {
        self.replies.lock().map(|r| r.len()).unwrap_or(0)
    }
}

impl ModelClient for ScriptedModelClient {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a mut dyn EventSink,
    ) -> ModelFuture<'a> {
        Box::pin(async move {
            // The same check the real client makes before sending.
            request.validate()?;
            if let Ok(mut r) = self.requests.lock() {
                r.push(request.clone());
            }
            events.event(StreamEvent::AttemptStarted { attempt: 1 });
            let reply = self.replies.lock().ok().and_then(|mut r| r.pop_front());
            match reply {
                Some(ScriptedReply::Response(r)) => {
                    for c in r.tool_calls() {
                        events.event(StreamEvent::ToolCallStarted {
                            id: c.id.clone(),
                            name: c.name.clone(),
                        });
                    }
                    Ok(r)
                }
                Some(ScriptedReply::Error(e)) => Err(e),
                None => Err(ModelError::InvalidResponse {
                    format: "script",
                    message: "the scripted model client has no reply left".into(),
                }),
            }
        })
    }
}
