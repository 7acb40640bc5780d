//! Progress of a model call as it happens, for live display (run events,
//! the UI). Nothing here is authoritative: the harness acts only on the
//! final [`crate::ModelResponse`]. A retry restarts the response, so
//! everything received since the last [`StreamEvent::AttemptStarted`] is
//! void when a new one arrives.

use std::time::Duration;

/// One step of progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A request is being sent (1 for the first).
    AttemptStarted { attempt: u32 },
    /// Text the model is writing.
    TextDelta { text: String },
    /// The model began a tool call (the id or name may still be empty on
    /// servers that send them late).
    ToolCallStarted { id: String, name: String },
    /// The provider marked a tool call complete (this is not permission to
    /// execute it: see [`crate::CallStatus`]).
    ToolCallDone { id: String },
    /// The attempt failed and another follows after `wait`.
    Retrying {
        next_attempt: u32,
        wait: Duration,
        /// The failure's stable code ([`crate::ModelError::code`]).
        code: &'static str,
    },
}

/// Receives progress. Called on the task that runs the model call; keep it
/// quick (hand the event to a channel).
pub trait EventSink: Send {
    fn event(&mut self, event: StreamEvent);
}

impl<F: FnMut(StreamEvent) + Send> EventSink for F {
    fn event(&mut self, event: StreamEvent) {
        self(event)
    }
}

/// Discards every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn event(&mut self, _: StreamEvent) {}
}
