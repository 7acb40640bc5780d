//! The [`ModelClient`] trait and its HTTP implementation over the control
//! process's one outbound client (NET-9).
//!
//! [`HttpModelClient`] sends one request per attempt, adds the credential
//! of its endpoint (resolved on the trusted side: the sandbox never sees
//! it), reads the answer streamed or whole, retries what may succeed later
//! ([`crate::retry`]) and returns a [`ModelResponse`] or a [`ModelError`]
//! scrubbed of the credential. It must not execute anything, keep state
//! between calls, or follow redirects.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use airlock_egress::authority::Host;
use airlock_egress::client::{ClientOptions, OutboundClient, StreamLimits};
use airlock_egress::policy::{Channel, Cidr, Credential};
use airlock_redact::Patterns;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::conversation::ModelRequest;
use crate::error::{ModelError, from_client};
use crate::events::{EventSink, StreamEvent};
use crate::profile::{CallLimits, Compat, Endpoint, ModelProfile, WireFormat, check_base_url};
use crate::response::ModelResponse;
use crate::retry::{Clock, RetryPolicy, SystemClock, retry_after};
use crate::wire::{self, StreamDecoder, anthropic};

/// The future of a model call.
pub type ModelFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ModelResponse, ModelError>> + Send + 'a>>;

/// Something that answers model requests: [`HttpModelClient`], or a fake
/// in tests ([`crate::ScriptedModelClient`]).
///
/// Cancellation: dropping the future stops the call (the connection is
/// closed; nothing partial is returned). A harness cancels a call for an
/// emergency stop by racing it against its stop signal.
pub trait ModelClient: Send + Sync + std::fmt::Debug {
    /// Sends `request` (retrying as the client's policy allows) and returns
    /// the final response. Progress goes to `events` as it arrives.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a mut dyn EventSink,
    ) -> ModelFuture<'a>;
}

/// A credential to add to every request: a header and its value, plus the
/// raw secret to scrub from anything the provider sends back.
#[derive(Clone)]
pub struct ModelAuth {
    header: HeaderName,
    value: HeaderValue,
    scrub: Arc<Patterns>,
}

impl std::fmt::Debug for ModelAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelAuth")
            .field("header", &self.header)
            .field("value", &"[REDACTED]")
            .finish()
    }
}

impl ModelAuth {
    /// `header: value`, where `value` contains `secret` (e.g.
    /// `Authorization: Bearer <secret>`, `x-api-key: <secret>`).
    pub fn new(header: &str, value: &Credential, secret: &Credential) -> Result<Self, ModelError> {
        let header = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| ModelError::Endpoint(format!("{header:?} is not a header name")))?;
        let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
            ModelError::Endpoint("the credential is not a valid header value".into())
        })?;
        value.set_sensitive(true);
        Ok(Self {
            header,
            value,
            scrub: Arc::new(Patterns::new([secret.expose().as_bytes()])),
        })
    }

    /// The credential of an egress channel (NET-6), as the proxy would add it.
    pub fn from_channel(channel: &Channel) -> Result<Self, ModelError> {
        let mut value = HeaderValue::from_str(channel.value.expose()).map_err(|_| {
            ModelError::Endpoint("the channel's credential is not a valid header value".into())
        })?;
        value.set_sensitive(true);
        Ok(Self {
            header: channel.header.clone(),
            value,
            scrub: channel.scrub.clone(),
        })
    }

    /// The patterns that find this credential in any encoding.
    pub fn patterns(&self) -> &Arc<Patterns> {
        &self.scrub
    }
}

/// Why a profile cannot be turned into an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The profile names a channel the operator's policy does not have (or
    /// whose secret is not set): the run is `blocked` with
    /// `provider_credentials_missing`.
    #[error("model profile uses channel {0:?}, which is not configured or has no credential")]
    CredentialsMissing(String),
    /// The channel exists but does not allow what the format needs.
    #[error("channel {channel:?} cannot carry model requests: {message}")]
    ChannelRefuses { channel: String, message: String },
    #[error("model endpoint refused: {0}")]
    Invalid(String),
}

/// Where and how one client sends requests.
#[derive(Debug, Clone)]
pub struct ModelEndpoint {
    pub format: WireFormat,
    /// Origin and optional path prefix, without the format's `/v1/…` path.
    base_url: String,
    pub auth: Option<ModelAuth>,
    pub compat: Compat,
    pub limits: CallLimits,
    pub retry: RetryPolicy,
}

impl ModelEndpoint {
    /// An endpoint at `base_url` (checked like a profile's) without a
    /// credential, default limits and retries.
    pub fn new(format: WireFormat, base_url: &str) -> Result<Self, EndpointError> {
        let base_url = check_base_url(base_url)
            .map_err(|m| EndpointError::Invalid(format!("{base_url:?} {m}")))?;
        Ok(Self {
            format,
            base_url,
            auth: None,
            compat: Compat::default(),
            limits: CallLimits::default(),
            retry: RetryPolicy::default(),
        })
    }

    /// The endpoint a profile describes. `channel` is the profile's channel
    /// looked up in the operator's egress policy (ignored for a `base_url`
    /// profile); `None` for a channel profile means its credential is
    /// missing.
    pub fn from_profile(
        profile: &ModelProfile,
        channel: Option<&Channel>,
    ) -> Result<Self, EndpointError> {
        let mut e = match (&profile.endpoint, channel) {
            (Endpoint::BaseUrl(url), _) => Self::new(profile.format, url)?,
            (Endpoint::Channel(name), None) => {
                return Err(EndpointError::CredentialsMissing(name.clone()));
            }
            (Endpoint::Channel(name), Some(ch)) => {
                let refuse = |message: String| EndpointError::ChannelRefuses {
                    channel: name.clone(),
                    message,
                };
                if ch.name != *name {
                    return Err(refuse(format!("the policy gave channel {:?}", ch.name)));
                }
                if !ch.methods.contains(&Method::POST) {
                    return Err(refuse("POST is not among its methods".into()));
                }
                let path = profile.format.path();
                if !ch
                    .path_prefixes
                    .iter()
                    .any(|p| path.starts_with(p.as_str()))
                {
                    return Err(refuse(format!("{path} is outside its paths")));
                }
                let scheme = if ch.scheme_https { "https" } else { "http" };
                let mut e = Self::new(
                    profile.format,
                    &format!("{scheme}://{}:{}", ch.host, ch.port),
                )?;
                e.auth = Some(ModelAuth::from_channel(ch).map_err(|err| refuse(err.to_string()))?);
                e
            }
        };
        e.compat = profile.compat;
        e.limits = profile.limits;
        e.retry = RetryPolicy::new(profile.retry);
        Ok(e)
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The request URL.
    pub fn url(&self) -> String {
        format!("{}{}", self.base_url, self.format.path())
    }
}

/// Outbound client options for a channel's upstream: the operator
/// configured it, so an IP-literal upstream in a private range is allowed,
/// and plain HTTP when the policy allowed it (loopback with
/// `insecure_upstream_for_tests` only). Names still go through
/// classification.
pub fn channel_client_options(channel: &Channel, mut base: ClientOptions) -> ClientOptions {
    if let Host::Ip(ip) = channel.host
        && let Ok(c) = Cidr::parse(&ip.to_string())
    {
        base.allowed_private.push(c);
    }
    if !channel.scheme_https {
        base.allow_plain_http = true;
    }
    base
}

/// The HTTP model client.
#[derive(Debug, Clone)]
pub struct HttpModelClient {
    endpoint: ModelEndpoint,
    transport: OutboundClient,
    clock: Arc<dyn Clock>,
}

impl HttpModelClient {
    pub fn new(endpoint: ModelEndpoint, transport: OutboundClient) -> Self {
        Self {
            endpoint,
            transport,
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses `clock` for retry waits (tests: [`crate::retry::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn endpoint(&self) -> &ModelEndpoint {
        &self.endpoint
    }

    fn headers(&self, stream: bool) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            http::header::ACCEPT,
            HeaderValue::from_static(if stream {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        h.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static("airlock"),
        );
        if self.endpoint.format == WireFormat::AnthropicMessages {
            h.insert(
                "anthropic-version",
                HeaderValue::from_static(anthropic::API_VERSION),
            );
        }
        if let Some(a) = &self.endpoint.auth {
            h.insert(a.header.clone(), a.value.clone());
        }
        h
    }

    fn scrub(&self, e: ModelError) -> ModelError {
        match &self.endpoint.auth {
            Some(a) => e.scrub(&a.scrub),
            None => e,
        }
    }

    /// One request and its answer.
    async fn attempt(
        &self,
        url: &str,
        body: Bytes,
        stream: bool,
        sink: &mut dyn EventSink,
    ) -> Result<ModelResponse, ModelError> {
        let l = &self.endpoint.limits;
        let limits = StreamLimits {
            head_timeout: l.head_timeout,
            idle_timeout: l.idle_timeout,
            total_deadline: l.deadline,
            max_body_bytes: l.max_response_bytes,
        };
        let mut resp = self
            .transport
            .send_streaming(Method::POST, url, self.headers(stream), body, limits)
            .await
            .map_err(from_client)?;
        let format = self.endpoint.format;
        if !(200..300).contains(&resp.status) {
            let status = resp.status;
            let wait = retry_after(&resp.headers, self.clock.now());
            // The error body is read within the same limits; if even that
            // fails, the status alone is the answer.
            let body = resp.collect().await.unwrap_or_default();
            let body = match &self.endpoint.auth {
                Some(a) => Bytes::from(a.scrub.redact(&body)),
                None => body,
            };
            return Err(wire::status_error(status, &body, wait));
        }
        let sse = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if !sse {
            // A server may answer a streaming request whole: accept it.
            let body = resp.collect().await.map_err(from_client)?;
            return wire::decode_body(format, &body, l.max_argument_bytes);
        }
        let mut decoder = StreamDecoder::new(format, l.max_argument_bytes, l.max_response_bytes);
        while let Some(chunk) = resp.chunk().await.map_err(from_client)? {
            decoder.push(&chunk, sink)?;
            if decoder.is_done() {
                break;
            }
        }
        decoder.finish()
    }

    async fn run(
        &self,
        request: &ModelRequest,
        sink: &mut dyn EventSink,
    ) -> Result<ModelResponse, ModelError> {
        let body = Bytes::from(wire::encode_request(
            self.endpoint.format,
            request,
            &self.endpoint.compat,
        )?);
        let url = self.endpoint.url();
        let policy = self.endpoint.retry;
        let mut waited = Duration::ZERO;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            sink.event(StreamEvent::AttemptStarted { attempt });
            let err = match self.attempt(&url, body.clone(), request.stream, sink).await {
                Ok(mut r) => {
                    r.attempts = attempt;
                    if let (Some(f), Some(a)) = (r.failure.as_mut(), &self.endpoint.auth) {
                        f.message = crate::error::scrub_text(&f.message, &a.scrub);
                        f.kind = crate::error::scrub_text(&f.kind, &a.scrub);
                    }
                    return Ok(r);
                }
                Err(e) => self.scrub(e),
            };
            if !err.is_retryable() {
                return Err(err);
            }
            let exhausted = |last: ModelError| ModelError::RetriesExhausted {
                attempts: attempt,
                last: Box::new(last),
            };
            if attempt >= policy.limits.max_attempts {
                return Err(exhausted(err));
            }
            let wait = policy.delay(attempt, err.retry_after(), self.clock.jitter());
            if waited.saturating_add(wait) > policy.limits.max_wait {
                return Err(exhausted(err));
            }
            sink.event(StreamEvent::Retrying {
                next_attempt: attempt + 1,
                wait,
                code: err.code(),
            });
            self.clock.sleep(wait).await;
            waited += wait;
        }
    }
}

impl ModelClient for HttpModelClient {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a mut dyn EventSink,
    ) -> ModelFuture<'a> {
        Box::pin(self.run(request, events))
    }
}
