//! What the scripted server answers: one [`Step`] per request, in order
//! (a retried request takes the next step, so a 429 followed by a success
//! is two steps).

use std::sync::Arc;

use serde_json::Value;

/// The wire format of a request, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/responses`
    Responses,
    /// `/v1/messages`
    Anthropic,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Chat, Format::Responses, Format::Anthropic];

    pub fn from_path(path: &str) -> Option<Self> {
        match path {
            "/v1/chat/completions" => Some(Self::Chat),
            "/v1/responses" => Some(Self::Responses),
            "/v1/messages" => Some(Self::Anthropic),
            _ => None,
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Responses => "/v1/responses",
            Self::Anthropic => "/v1/messages",
        }
    }
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// Sent verbatim (may be partial or invalid JSON on purpose).
    pub arguments: String,
}

/// A scripted tool call.
pub fn call(id: &str, name: &str, arguments: &str) -> Call {
    Call {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// Token counts to report. `input` includes `cached`, `output` includes
/// `reasoning` (the OpenAI convention; the Anthropic rendering converts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

/// What the model says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Text(String),
    Calls {
        text: Option<String>,
        calls: Vec<Call>,
    },
}

/// Something going wrong on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    None,
    /// An error status with these headers and body (429 with
    /// `retry-after`, 500, 529, 400, …).
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// The body ends cleanly after this many events (streams) or half the
    /// bytes (whole bodies): the terminal event never comes.
    CutAfter(usize),
    /// The connection is reset after this many events (or half the body).
    AbortAfter(usize),
    /// After this many events, nothing more is sent; the connection stays
    /// open until the client leaves.
    StallAfter(usize),
    /// The response head never comes.
    NoHead,
    /// The output token limit is hit: the last call's arguments (or the
    /// text) are cut in half and the answer ends with `length` /
    /// `max_tokens` / `response.incomplete` (`max_output_tokens`).
    Truncate,
    /// The provider reports an error after the first event (a whole body
    /// becomes that error object with status 200).
    ErrorEvent {
        kind: String,
        message: String,
    },
    /// Responses only: `response.failed` with this error (other formats:
    /// as `ErrorEvent`).
    Failed {
        code: String,
        message: String,
    },
    /// A 200 whose body is these bytes (with the content type of the
    /// requested mode).
    Garbage(String),
}

/// A check of one request body, beyond the format's well-formedness.
pub type Check = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// One scripted answer.
#[derive(Clone)]
pub struct Step {
    pub reply: Reply,
    pub fault: Fault,
    pub usage: Usage,
    /// Bytes per text or argument fragment in a stream (rounded up to a
    /// character boundary).
    pub fragment: usize,
    /// Send the fragments of parallel calls interleaved (Chat Completions).
    pub interleave: bool,
    pub check: Option<Check>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("reply", &self.reply)
            .field("fault", &self.fault)
            .field("usage", &self.usage)
            .field("fragment", &self.fragment)
            .field("interleave", &self.interleave)
            .field("check", &self.check.is_some())
            .finish()
    }
}

impl Step {
    fn new(reply: Reply) -> Self {
        Self {
            reply,
            fault: Fault::None,
            usage: Usage {
                input: 10,
                cached: 0,
                output: 5,
                reasoning: 0,
            },
            fragment: 5,
            interleave: false,
            check: None,
        }
    }

    /// A final text answer.
    pub fn text(text: &str) -> Self {
        Self::new(Reply::Text(text.into()))
    }

    /// Tool calls (several: parallel calls).
    pub fn calls(calls: Vec<Call>) -> Self {
        Self::new(Reply::Calls { text: None, calls })
    }

    /// Text, then tool calls.
    pub fn text_and_calls(text: &str, calls: Vec<Call>) -> Self {
        Self::new(Reply::Calls {
            text: Some(text.into()),
            calls,
        })
    }

    /// An error status with a JSON error body in the requested format's
    /// shape (see [`Step::status_body`] for an exact body).
    pub fn status(status: u16, kind: &str, message: &str) -> Self {
        let body =
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
        Self::status_body(status, &body.to_string())
    }

    /// An error status with exactly this body.
    pub fn status_body(status: u16, body: &str) -> Self {
        Self::new(Reply::Text(String::new())).fault(Fault::Status {
            status,
            headers: Vec::new(),
            body: body.into(),
        })
    }

    /// Adds a response header (to a [`Fault::Status`] step).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Fault::Status { headers, .. } = &mut self.fault {
            headers.push((name.into(), value.into()));
        }
        self
    }

    pub fn fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    pub fn fragment(mut self, bytes: usize) -> Self {
        self.fragment = bytes.max(1);
        self
    }

    pub fn interleave(mut self) -> Self {
        self.interleave = true;
        self
    }

    /// Checks the request this step answers; a failure is recorded as a
    /// violation and answered with 400.
    pub fn check(
        mut self,
        f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some(Arc::new(f));
        self
    }
}
