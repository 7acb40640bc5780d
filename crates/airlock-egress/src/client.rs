//! The one outbound HTTP client of the control process (NET-9).
//!
//! Everything the trusted process fetches itself (webhook targets, MCP
//! servers, model endpoints other than configured channels) goes through
//! [`OutboundClient`]: a total deadline plus per-stage timeouts, no ambient
//! proxy or CA variables (it reads none; roots come from fixed system
//! paths), no automatic redirects, a response size ceiling, and the same
//! address classification as the proxy for every user-supplied URL.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

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

    /// Sends one request within the total deadline.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<ClientResponse, ClientError> {
        tokio::time::timeout(
            self.opts.total_deadline,
            self.send_inner(method, url, headers, body),
        )
        .await
        .map_err(|_| ClientError::Timeout("request"))?
    }

    async fn send_inner(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<ClientResponse, ClientError> {
        let (https, target, path) = parse_url(url, self.opts.allow_plain_http)?;
        let addrs = self.check(&target).await?;
        let mut stream = None;
        for a in &addrs {
            match tokio::time::timeout(self.opts.connect_timeout, TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    stream = Some(s);
                    break;
                }
                Ok(Err(_)) => {}
                Err(_) => return Err(ClientError::Timeout("connect")),
            }
        }
        let stream = stream.ok_or(ClientError::Connect)?;
        let host_header = target.to_string();
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
            self.exchange(
                TokioIo::new(tls),
                method,
                &path,
                &host_header,
                headers,
                body,
            )
            .await
        } else {
            self.exchange(
                TokioIo::new(stream),
                method,
                &path,
                &host_header,
                headers,
                body,
            )
            .await
        }
    }

    async fn exchange<S>(
        &self,
        io: TokioIo<S>,
        method: Method,
        path: &str,
        host: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<ClientResponse, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(body))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        *req.headers_mut() = headers;
        if let Ok(v) = HeaderValue::from_str(host) {
            req.headers_mut().insert(header::HOST, v);
        }
        let resp = tokio::time::timeout(self.opts.response_timeout, sender.send_request(req))
            .await
            .map_err(|_| ClientError::Timeout("response"))?
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let (parts, mut body) = resp.into_parts();
        let max = self.opts.max_response_bytes;
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Http(e.to_string()))?;
            if let Some(d) = frame.data_ref() {
                if buf.len() + d.len() > max {
                    return Err(ClientError::TooLarge(max));
                }
                buf.extend_from_slice(d);
            }
        }
        Ok(ClientResponse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: buf.freeze(),
        })
    }
}
