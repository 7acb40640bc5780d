//! A scripted model server for tests: a real HTTP/1.1 server on
//! `127.0.0.1` that answers `/v1/chat/completions`, `/v1/responses` and
//! `/v1/messages` from a script of [`Step`]s, streamed (SSE) when the
//! request asks for `stream: true` and whole otherwise.
//!
//! Every request is recorded ([`ScriptedServer::requests`]) and checked:
//! its body must be a conversation the provider would accept
//! ([`transcript::check`]: each tool call followed by exactly one result in
//! the order the provider requires) and pass the step's own check. A
//! failure is recorded ([`ScriptedServer::violations`]) and answered with
//! 400, as the provider would. An optional expected credential header is
//! checked too (401 otherwise).
//!
//! Faults ([`Fault`]) make the provider misbehave on purpose: error
//! statuses with `retry-after`, cut and reset streams, stalls, a missing
//! response head, token-limit truncation, error events, garbage bodies.
//!
//! This crate is for tests only (`publish = false`, a dev-dependency); it
//! shares no code with `airlock-model`, so the two check each other.
//!
//! A harness test drives the real client against it like this:
//!
//! ```text
//! let server = ScriptedServer::start([
//!     Step::calls(vec![call("c1", "run_command", r#"{"argv": ["ls"]}"#)]),
//!     Step::text("done").check(|body| /* the result of c1 is in body */ Ok(())),
//! ]).await?;
//! let endpoint = ModelEndpoint::new(WireFormat::OpenAiChat, &server.base_url())?;
//! let transport = OutboundClient::new(resolver, ClientOptions {
//!     allow_plain_http: true,                                    // loopback, plain HTTP:
//!     allowed_private: vec![Cidr::parse("127.0.0.1/32")?],       // both refused by default
//!     ..ClientOptions::default()
//! });
//! let client = HttpModelClient::new(endpoint, transport).with_clock(Arc::new(ManualClock::new(..)));
//! … run the agent …
//! assert_eq!(server.violations(), Vec::<String>::new());       // every request well-formed
//! assert_eq!(server.remaining(), 0);                            // every step used
//! ```

pub mod render;
pub mod script;
pub mod transcript;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::channel::{Channel, Sender};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use render::Rendered;
pub use script::{Call, Check, Fault, Format, Reply, Step, Usage, call};

/// Largest request body the server reads.
const MAX_REQUEST: usize = 64 << 20;

type Body = Channel<Bytes, std::io::Error>;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub format: Option<Format>,
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
    pub raw: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct State {
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<Recorded>>,
    violations: Mutex<Vec<String>>,
    auth: Option<(String, String)>,
}

impl State {
    fn violation(&self, v: String) {
        if let Ok(mut l) = self.violations.lock() {
            l.push(v);
        }
    }
}

/// The running server; dropping it stops it (open streams are closed).
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    state: Arc<State>,
    _stop: watch::Sender<()>,
}

impl ScriptedServer {
    /// Starts a server that answers with `steps`, in order.
    pub async fn start(steps: impl IntoIterator<Item = Step>) -> std::io::Result<Self> {
        Self::start_inner(steps, None).await
    }

    /// Like [`ScriptedServer::start`], and every request must carry
    /// `header: value` (401 otherwise, recorded as a violation).
    pub async fn start_with_auth(
        steps: impl IntoIterator<Item = Step>,
        header: &str,
        value: &str,
    ) -> std::io::Result<Self> {
        Self::start_inner(
            steps,
            Some((header.to_ascii_lowercase(), value.to_string())),
        )
        .await
    }

    async fn start_inner(
        steps: impl IntoIterator<Item = Step>,
        auth: Option<(String, String)>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            steps: Mutex::new(steps.into_iter().collect()),
            auth,
            ..State::default()
        });
        let (stop_tx, stop_rx) = watch::channel(());
        tokio::spawn(accept_loop(listener, state.clone(), stop_rx));
        Ok(Self {
            addr,
            state,
            _stop: stop_tx,
        })
    }

    /// `http://127.0.0.1:PORT` (the base URL, without `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a step to the script.
    pub fn push(&self, step: Step) {
        if let Ok(mut s) = self.state.steps.lock() {
            s.push_back(step);
        }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Every failed check so far (`request N: reason`).
    pub fn violations(&self) -> Vec<String> {
        self.state
            .violations
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Steps not yet used.
    pub fn remaining(&self) -> usize {
        self.state.steps.lock().map(|s| s.len()).unwrap_or(0)
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<()>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = state.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(req, state.clone(), stop.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            _ = stop.changed() => return,
        }
    }
}

fn respond(
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
) -> (Sender<Bytes, std::io::Error>, Response<Body>) {
    let (tx, body) = Channel::new(64);
    let mut resp = Response::new(body);
    if let Ok(s) = status.try_into() {
        *resp.status_mut() = s;
    }
    let h = resp.headers_mut();
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        h.insert(http::header::CONTENT_TYPE, v);
    }
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            h.append(k, v);
        }
    }
    (tx, resp)
}

/// A whole body, sent at once.
fn whole(
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Response<Body> {
    let (mut tx, resp) = respond(status, content_type, headers);
    tokio::spawn(async move {
        let _ = tx.send_data(Bytes::from(body)).await;
    });
    resp
}

fn error_json(format: Option<Format>, kind: &str, message: &str) -> Vec<u8> {
    let v = match format {
        Some(Format::Anthropic) => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        _ => json!({"error": {"type": kind, "code": kind, "message": message}}),
    };
    v.to_string().into_bytes()
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    mut stop: watch::Receiver<()>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let raw = match Limited::new(req.into_body(), MAX_REQUEST).collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => Vec::new(),
    };
    let format = Format::from_path(&path);
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let number = {
        let mut r = match state.requests.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        r.push(Recorded {
            path: path.clone(),
            format,
            headers: headers.clone(),
            body: body.clone(),
            raw,
        });
        r.len()
    };
    let Some(format) = format else {
        state.violation(format!("request {number}: unknown path {path}"));
        return Ok(whole(
            404,
            "application/json",
            &[],
            error_json(None, "not_found", "unknown path"),
        ));
    };
    if let Some((name, value)) = &state.auth {
        let got = headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str());
        if got != Some(value.as_str()) {
            state.violation(format!("request {number}: missing or wrong {name} header"));
            return Ok(whole(
                401,
                "application/json",
                &[],
                error_json(Some(format), "authentication_error", "invalid x-api-key"),
            ));
        }
    }
    let step = state.steps.lock().ok().and_then(|mut s| s.pop_front());
    let Some(step) = step else {
        state.violation(format!("request {number}: the script has no step left"));
        return Ok(whole(
            500,
            "application/json",
            &[],
            error_json(Some(format), "api_error", "script exhausted"),
        ));
    };
    if body.is_null() {
        state.violation(format!("request {number}: body is not JSON"));
        return Ok(whole(
            400,
            "application/json",
            &[],
            error_json(Some(format), "invalid_request_error", "body is not JSON"),
        ));
    }
    let checked = transcript::check(format, &body).and_then(|()| match &step.check {
        Some(c) => c(&body),
        None => Ok(()),
    });
    if let Err(reason) = checked {
        state.violation(format!("request {number}: {reason}"));
        return Ok(whole(
            400,
            "application/json",
            &[],
            error_json(Some(format), "invalid_request_error", &reason),
        ));
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    match &step.fault {
        Fault::Status {
            status,
            headers,
            body,
        } => {
            return Ok(whole(
                *status,
                "application/json",
                headers,
                body.clone().into_bytes(),
            ));
        }
        Fault::NoHead => {
            let _ = stop.changed().await;
            return Ok(whole(500, "application/json", &[], Vec::new()));
        }
        Fault::Garbage(text) => {
            let ct = if stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            return Ok(whole(200, ct, &[], text.clone().into_bytes()));
        }
        _ => {}
    }
    let rendered = render::render(format, &step, &model, stream, include_usage);
    let (pieces, content_type) = match rendered {
        Rendered::Events(events) => (
            events
                .into_iter()
                .map(String::into_bytes)
                .collect::<Vec<_>>(),
            "text/event-stream",
        ),
        Rendered::Body(v) => {
            let bytes = v.to_string().into_bytes();
            // A whole body is "cut" halfway through its bytes.
            let (a, b) = bytes.split_at(bytes.len() / 2);
            (vec![a.to_vec(), b.to_vec()], "application/json")
        }
    };
    let (mut tx, resp) = respond(200, content_type, &[]);
    let fault = step.fault.clone();
    let whole_body = content_type == "application/json";
    tokio::spawn(async move {
        let limit = match fault {
            Fault::CutAfter(n) | Fault::AbortAfter(n) | Fault::StallAfter(n) => {
                if whole_body {
                    1
                } else {
                    n
                }
            }
            _ => usize::MAX,
        };
        for p in pieces.into_iter().take(limit) {
            if tx.send_data(Bytes::from(p)).await.is_err() {
                return;
            }
        }
        match fault {
            Fault::AbortAfter(_) => tx.abort(std::io::Error::other("scripted reset")),
            Fault::StallAfter(_) => {
                let _ = stop.changed().await;
                drop(tx);
            }
            _ => drop(tx),
        }
    });
    Ok(resp)
}
