//! The one outbound HTTP client of the control process (NET-9).
//!
//! Everything the trusted process fetches itself (webhook targets, MCP
//! servers, model endpoints other than configured channels) goes through
//! [`OutboundClient`]: a total deadline plus per-stage timeouts, no ambient
//! proxy or CA variables (it reads none; roots come from fixed system
//! paths), no automatic redirects, a response size ceiling, and the same
//! address classification as the proxy for every user-supplied URL.
//!
//! Two shapes of exchange: [`OutboundClient::send`] buffers a whole
//! response under one deadline; [`OutboundClient::send_streaming`] hands
//! back the head and then the body chunk by chunk (model streams, SSE),
//! with a head timeout, an idle timeout between chunks, a total deadline
//! and a byte ceiling enforced on every read. Dropping a
//! [`StreamingResponse`] closes the connection.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::authority::{self, Authority, Host};
use crate::classify::{self, AddrClass};
use crate::policy::{self, Cidr};
use crate::resolve::{Resolve, ResolveError};

/// Limits and allowances of one client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub total_deadline: Duration,
    pub connect_timeout: Duration,
    pub tls_timeout: Duration,
    /// Time from sending the request to the response head.
    pub response_timeout: Duration,
    pub max_response_bytes: usize,
    /// Plain `http://` URLs (off by default).
    pub allow_plain_http: bool,
    /// Non-public networks the operator explicitly allows (never metadata).
    pub allowed_private: Vec<Cidr>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            total_deadline: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            tls_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(20),
            max_response_bytes: 4 << 20,
            allow_plain_http: false,
            allowed_private: Vec::new(),
        }
    }
}

/// A complete, size-checked response. Redirects are returned, not followed.
#[derive(Debug, Clone)]
pub struct ClientResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Limits of one streamed exchange ([`OutboundClient::send_streaming`]).
/// The client's connect and TLS timeouts still apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// From sending the request to the response head.
    pub head_timeout: Duration,
    /// The longest wait for the next body chunk.
    pub idle_timeout: Duration,
    /// The whole exchange, from connecting to the last byte of the body.
    pub total_deadline: Duration,
    /// Body bytes read before the response is refused as too large.
    pub max_body_bytes: usize,
}

/// A response whose body is read chunk by chunk, each read bounded by the
/// idle timeout, the total deadline and the byte ceiling. Redirects are
/// returned, not followed. Dropping it closes the connection (that is how
/// a caller cancels a stream).
#[derive(Debug)]
pub struct StreamingResponse {
    pub status: u16,
    pub headers: HeaderMap,
    body: Incoming,
    deadline: Instant,
    idle: Duration,
    max: usize,
    received: usize,
    ended: bool,
}

impl StreamingResponse {
    /// The next chunk of body bytes, `None` once the body ended cleanly. A
    /// body the peer cut short is an [`ClientError::Http`] error, never a
    /// clean end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let now = Instant::now();
            if now >= self.deadline {
                return Err(ClientError::Timeout("deadline"));
            }
            let idle_end = now + self.idle;
            let (until, stage) = if idle_end < self.deadline {
                (idle_end, "stream_idle")
            } else {
                (self.deadline, "deadline")
            };
            let frame = match tokio::time::timeout_at(until, self.body.frame()).await {
                Err(_) => return Err(ClientError::Timeout(stage)),
                Ok(None) => {
                    self.ended = true;
                    return Ok(None);
                }
                Ok(Some(Err(e))) => return Err(ClientError::Http(e.to_string())),
                Ok(Some(Ok(frame))) => frame,
            };
            // Trailers carry no body bytes; keep reading.
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if self.received.saturating_add(data.len()) > self.max {
                return Err(ClientError::TooLarge(self.max));
            }
            self.received += data.len();
            return Ok(Some(data));
        }
    }

    /// The rest of the body, within the same limits.
    pub async fn collect(mut self) -> Result<Bytes, ClientError> {
        let mut buf = BytesMut::new();
        while let Some(d) = self.chunk().await? {
            buf.extend_from_slice(&d);
        }
        Ok(buf.freeze())
    }

    /// Body bytes received so far.
    pub fn received(&self) -> usize {
        self.received
    }
}

/// Why a request failed; [`ClientError::reason`] gives a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("url refused: {0}")]
    Url(&'static str),
    #[error("destination refused: {0}")]
    Denied(&'static str),
    #[error(transparent)]
    Dns(#[from] ResolveError),
    #[error("could not connect")]
    Connect,
    #[error("tls failed: {0}")]
    Tls(String),
    #[error("timed out during {0}")]
    Timeout(&'static str),
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    #[error("http error: {0}")]
    Http(String),
}

impl ClientError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Url(r) | Self::Denied(r) => r,
            Self::Dns(e) => e.reason(),
            Self::Connect => "connect_failed",
            Self::Tls(_) => "tls_failed",
            Self::Timeout(_) => "timeout",
            Self::TooLarge(_) => "response_too_large",
            Self::Http(_) => "http_error",
        }
    }
}

/// The reviewed outbound client.
#[derive(Clone)]
pub struct OutboundClient {
    resolver: Arc<dyn Resolve>,
    tls: tokio_rustls::TlsConnector,
    opts: ClientOptions,
}

impl std::fmt::Debug for OutboundClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundClient")
            .field("opts", &self.opts)
            .finish()
    }
}

/// Splits `scheme://authority/path` strictly.
fn parse_url(url: &str, allow_plain: bool) -> Result<(bool, Authority, String), ClientError> {
    if let Some(rest) = url.strip_prefix("https://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (auth, path) = rest.split_at(end);
        if path.contains('#') || auth.contains('#') {
            return Err(ClientError::Url("url_fragment"));
        }
        let a = authority::parse_authority(auth, Some(443))
            .map_err(|e| ClientError::Url(e.reason()))?;
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path.starts_with("//") || path.contains('\\') {
            return Err(ClientError::Url("url_bad_path"));
        }
        return Ok((true, a, path));
    }
    if url.starts_with("http://") {
        if !allow_plain {
            return Err(ClientError::Url("plain_http_not_allowed"));
        }
        let (a, path) =
            authority::parse_absolute_http_url(url).map_err(|e| ClientError::Url(e.reason()))?;
        return Ok((false, a, path));
    }
    Err(ClientError::Url("url_scheme_not_allowed"))
}

impl OutboundClient {
    pub fn new(resolver: Arc<dyn Resolve>, opts: ClientOptions) -> Self {
        Self {
            resolver,
            tls: crate::proxy::tls_connector(),
            opts,
        }
    }

    /// Uses `tls` instead of the system roots (tests bring their own CA).
    pub fn with_tls(mut self, tls: tokio_rustls::TlsConnector) -> Self {
        self.tls = tls;
        self
    }

    fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        if policy::never_allowed(ip) {
            return Some(AddrClass::Metadata.reason());
        }
        let c = classify::classify(ip);
        if c.class == AddrClass::Public || self.opts.allowed_private.iter().any(|n| n.contains(ip))
        {
            None
        } else {
            Some(c.class.reason())
        }
    }

    /// The checked addresses for a target (resolved once).
    pub async fn check(&self, target: &Authority) -> Result<Vec<SocketAddr>, ClientError> {
        let ips = match &target.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(n) => {
                if let Some(reason) = authority::special_use(n) {
                    return Err(ClientError::Denied(reason));
                }
                self.resolver.lookup(n).await?
            }
        };
        for ip in &ips {
            if let Some(reason) = self.refusal(*ip) {
                return Err(ClientError::Denied(reason));
            }
        }
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, target.port))
            .collect())
    }

    /// Sends one request within the total deadline and buffers the whole
    /// response (up to `max_response_bytes`).
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<ClientResponse, ClientError> {
        let limits = StreamLimits {
            head_timeout: self.opts.response_timeout,
            idle_timeout: self.opts.total_deadline,
            total_deadline: self.opts.total_deadline,
            max_body_bytes: self.opts.max_response_bytes,
        };
        let resp = self
            .send_streaming(method, url, headers, body, limits)
            .await?;
        let (status, headers) = (resp.status, resp.headers.clone());
        let body = resp.collect().await?;
        Ok(ClientResponse {
            status,
            headers,
            body,
        })
    }

    /// Sends one request and returns as soon as the response head arrived;
    /// the body is then read with [`StreamingResponse::chunk`]. The total
    /// deadline starts now and covers the body too.
    pub async fn send_streaming(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        limits: StreamLimits,
    ) -> Result<StreamingResponse, ClientError> {
        let deadline = Instant::now() + limits.total_deadline;
        let resp = tokio::time::timeout_at(
            deadline,
            self.open(method, url, headers, body, limits.head_timeout),
        )
        .await
        .map_err(|_| ClientError::Timeout("request"))??;
        let (parts, body) = resp.into_parts();
        Ok(StreamingResponse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            deadline,
            idle: limits.idle_timeout,
            max: limits.max_body_bytes,
            received: 0,
            ended: false,
        })
    }

    /// Connects to a checked address and sends the request; answers the
    /// response head.
    async fn open(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        head_timeout: Duration,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let (https, target, path) = parse_url(url, self.opts.allow_plain_http)?;
        let addrs = self.check(&target).await?;
        let mut stream = None;
        for a in &addrs {
            match tokio::time::timeout(self.opts.connect_timeout, TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    crate::proxy::send_small_writes_at_once(&s);
                    stream = Some(s);
                    break;
                }
                Ok(Err(_)) => {}
                Err(_) => return Err(ClientError::Timeout("connect")),
            }
        }
        let stream = stream.ok_or(ClientError::Connect)?;
        let host_header = target.to_string();
        let exchange = Exchange {
            method,
            path: &path,
            host: &host_header,
            headers,
            body,
            head_timeout,
        };
        if https {
            let server_name = match &target.host {
                Host::Name(n) => rustls::pki_types::ServerName::try_from(n.clone())
                    .map_err(|e| ClientError::Tls(e.to_string()))?,
                Host::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
            };
            let tls =
                tokio::time::timeout(self.opts.tls_timeout, self.tls.connect(server_name, stream))
                    .await
                    .map_err(|_| ClientError::Timeout("tls"))?
                    .map_err(|e| ClientError::Tls(e.to_string()))?;
            exchange.run(TokioIo::new(tls)).await
        } else {
            exchange.run(TokioIo::new(stream)).await
        }
    }
}

/// One request on a fresh connection.
struct Exchange<'a> {
    method: Method,
    path: &'a str,
    host: &'a str,
    headers: HeaderMap,
    body: Bytes,
    head_timeout: Duration,
}

impl Exchange<'_> {
    async fn run<S>(self, io: TokioIo<S>) -> Result<hyper::Response<Incoming>, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        // The connection task ends when the response body is read to its
        // end or dropped, so a dropped stream closes the socket.
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(self.method)
            .uri(self.path)
            .body(Full::new(self.body))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        *req.headers_mut() = self.headers;
        if let Ok(v) = HeaderValue::from_str(self.host) {
            req.headers_mut().insert(header::HOST, v);
        }
        tokio::time::timeout(self.head_timeout, sender.send_request(req))
            .await
            .map_err(|_| ClientError::Timeout("response"))?
            .map_err(|e| ClientError::Http(e.to_string()))
    }
}
