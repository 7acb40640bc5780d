//! The proxy server: one accept loop per sandbox listener (NET-1), CONNECT
//! tunnels and plain-HTTP forwarding through the decision pipeline, and
//! credential channels (NET-6), with limits and one JSON line per decision
//! and per closed connection (NET-7). A decided plain or channel request may
//! reuse an idle upstream connection of its own listener opened for the same
//! route and a checked address (`pool`); a tunnel always gets its own.
//!
//! A channel's response is scrubbed of the credential before the sandbox
//! sees it: header values (and trailers) through `airlock_redact::Patterns`,
//! the body through `airlock_redact::StreamRedactor` as it streams (every
//! form the redactor knows, a credential cut across frames included, only a
//! bounded tail held back). To make the body scannable the request asks for
//! `Accept-Encoding: identity` and drops `Range`/`If-Range`; an upstream that
//! still answers with a `Content-Encoding` is refused
//! (`upstream_encoded_response`), and the response loses its
//! `Content-Length` (replacement changes the length).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::authority::{self, Authority, Host};
use crate::decide::{self, Decision, Mode, host_string};
use crate::policy::{Channel, Limits, Policy, PolicyError};
use crate::resolve::Resolve;
use airlock_redact::StreamRedactor;

mod accept;
mod logsink;
mod pool;

pub use logsink::{Line, LogSink, MemoryLog, NullLog, WriterLog};

/// Header carrying the machine-readable reason of a refusal.
pub const REASON_HEADER: &str = "x-airlock-reason";
/// Where the sandbox finds its proxy (its own loopback, its own listener).
pub const SANDBOX_PROXY_ADDR: &str = "127.0.0.1:3128";
/// Path prefix of credential channels on the proxy.
pub const CHANNEL_PREFIX: &str = "/channels/";

type Body = BoxBody<Bytes, hyper::Error>;

/// Per-sandbox totals (the `egress` field of a result).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EgressSummary {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug, Default)]
struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    tunnels: AtomicUsize,
    /// Client connections open on the listener, and those being refused.
    connections: AtomicUsize,
    refusing: AtomicUsize,
    window: Mutex<(Option<Instant>, u32)>,
}

/// Connections over a listener's cap that are answered 429 at once, per
/// place of the cap (each lives until its request is answered or its
/// header timeout); past them, connections are closed unanswered.
const REFUSING_PER_PLACE: usize = 16;

/// Takes one of `cap` places counted by `n`, or none when all are taken
/// (check and take in one step, so concurrent takers never exceed `cap`).
fn take_place(n: &AtomicUsize, cap: usize) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
        (v < cap).then_some(v + 1)
    })
    .is_ok()
}

/// A place taken with [`take_place`], given back when dropped.
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Counters {
    fn summary(&self) -> EgressSummary {
        EgressSummary {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }
    fn total_bytes(&self) -> u64 {
        self.bytes_up.load(Ordering::Relaxed) + self.bytes_down.load(Ordering::Relaxed)
    }
    /// A one-second window rate limit.
    fn admit(&self, per_second: u32) -> bool {
        let Ok(mut w) = self.window.lock() else {
            return false;
        };
        let now = Instant::now();
        match w.0 {
            Some(start) if now.duration_since(start) < Duration::from_secs(1) => {
                w.1 += 1;
                w.1 <= per_second
            }
            _ => {
                *w = (Some(now), 1);
                true
            }
        }
    }
}

struct Shared {
    policy: Option<Policy>,
    resolver: Arc<dyn Resolve>,
    tls: tokio_rustls::TlsConnector,
    log: Arc<dyn LogSink>,
    /// While set, every new request is refused (`emergency_stop`).
    halt: OnceLock<Arc<AtomicBool>>,
}

struct Ctx {
    shared: Arc<Shared>,
    counters: Arc<Counters>,
    sandbox: String,
    run: Option<String>,
    /// The authority under which clients reach this listener.
    self_authority: String,
    /// This listener's idle upstream connections (never shared with another listener).
    pool: Arc<pool::Pool<Body>>,
}

impl Ctx {
    fn limits(&self) -> Limits {
        self.shared
            .policy
            .as_ref()
            .map(|p| p.limits.clone())
            .unwrap_or_default()
    }
    /// A rare line, built as a JSON object.
    fn log(&self, v: serde_json::Value) {
        self.line(logsink::Event::Value(v));
    }
    fn line(&self, event: logsink::Event<'_>) {
        self.shared.log.line(&logsink::Line {
            sandbox: &self.sandbox,
            run: self.run.as_deref(),
            event,
        });
    }
    fn record(&self, d: &Decision, kind: &str) {
        if d.allow {
            self.counters.allowed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.denied.fetch_add(1, Ordering::Relaxed);
        }
        self.line(logsink::Event::Decision { kind, d });
    }
}

/// The proxy runtime: shared by every sandbox of this process.
pub struct Egress {
    rt: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    policy_error: Option<String>,
    /// The threads accepting this proxy's listeners; stopped before the runtime is dropped.
    acceptors: Mutex<Vec<Arc<accept::Acceptor>>>,
}

impl Drop for Egress {
    fn drop(&mut self) {
        let acceptors = match self.acceptors.get_mut() {
            Ok(a) => std::mem::take(a),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for a in acceptors {
            a.stop();
        }
    }
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("policy_error", &self.policy_error)
            .finish()
    }
}

/// A running per-sandbox listener.
#[derive(Debug)]
pub struct SandboxEgress {
    counters: Arc<Counters>,
    acceptor: Arc<accept::Acceptor>,
}

impl SandboxEgress {
    pub fn summary(&self) -> EgressSummary {
        self.counters.summary()
    }
    /// Stops accepting and returns the totals. When it returns, the listening socket is
    /// closed: a new connection is refused. Connections already accepted are served on until
    /// they end or the proxy is dropped.
    pub fn shutdown(self) -> EgressSummary {
        self.acceptor.stop();
        self.counters.summary()
    }
}

/// System CA bundles, read from fixed paths: ambient variables such as
/// `SSL_CERT_FILE` are ignored on purpose (NET-9), so an environment
/// cannot swap the trust store of the trusted process.
pub const CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// A TLS connector that verifies against the system roots (fails closed
/// with an empty store when none can be read).
pub fn tls_connector() -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for path in CA_BUNDLES {
        if let Ok(iter) = CertificateDer::pem_file_iter(path) {
            roots.add_parsable_certificates(iter.flatten());
            break;
        }
    }
    tls_connector_with_roots(roots)
}

/// A TLS connector that trusts exactly `roots` (tests add their own CA).
pub fn tls_connector_with_roots(roots: rustls::RootCertStore) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
        Err(_) => unreachable_config(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[allow(clippy::expect_used)]
fn unreachable_config() -> rustls::ClientConfig {
    // The ring provider always supports the safe default versions (a rustls
    // invariant); this path exists only because the builder is fallible.
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("ring supports TLS 1.3")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

impl Egress {
    /// A proxy runtime. An `Err` policy is kept as "no policy": every
    /// request is denied with `no_policy` (NET-2).
    pub fn new(
        policy: Result<Policy, PolicyError>,
        resolver: Arc<dyn Resolve>,
        log: Arc<dyn LogSink>,
    ) -> std::io::Result<Self> {
        Self::with_tls(policy, resolver, log, tls_connector())
    }

    /// Like [`Egress::new`], verifying upstream TLS with `tls` (tests bring
    /// their own CA; production uses the system roots).
    pub fn with_tls(
        policy: Result<Policy, PolicyError>,
        resolver: Arc<dyn Resolve>,
        log: Arc<dyn LogSink>,
        tls: tokio_rustls::TlsConnector,
    ) -> std::io::Result<Self> {
        // One worker thread per proxy: a sandbox's traffic is relayed
        // without waking a second thread for each hop of a request. On the
        // 2-core benchmark machine this raised CONNECT keep-alive from 0.40
        // to 0.51–0.53 of a direct connection and cut its p99 by a quarter
        // (BENCHMARKS.md, "One thread per proxy"); a proxy serves one
        // sandbox, whose agent rarely needs more than a core of relaying.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("airlock-egress")
            .enable_all()
            .build()?;
        let (policy, policy_error) = match policy {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Self {
            rt,
            shared: Arc::new(Shared {
                policy,
                resolver,
                tls,
                log,
                halt: OnceLock::new(),
            }),
            policy_error,
            acceptors: Mutex::default(),
        })
    }

    /// A flag that, while set, makes the proxy refuse every new request
    /// with 403 `emergency_stop` (read on each request; tunnels already
    /// open are the caller's to end, by ending the sandbox). Set once,
    /// before serving; false when a flag was already set.
    pub fn halt_when(&self, flag: Arc<AtomicBool>) -> bool {
        self.shared.halt.set(flag).is_ok()
    }

    /// The load error when the proxy is running without a policy.
    pub fn policy_error(&self) -> Option<&str> {
        self.policy_error.as_deref()
    }

    pub fn policy(&self) -> Option<&Policy> {
        self.shared.policy.as_ref()
    }

    /// Serves one sandbox's listener until [`SandboxEgress::shutdown`] or until this proxy
    /// is dropped. The listener is accepted on a thread of its own (`accept`'s module doc
    /// says why); each connection is served on the runtime.
    pub fn serve_sandbox(
        &self,
        listener: std::net::TcpListener,
        sandbox: &str,
        run: Option<&str>,
        self_authority: &str,
    ) -> std::io::Result<SandboxEgress> {
        let counters = Arc::new(Counters::default());
        let ctx = Arc::new(Ctx {
            shared: self.shared.clone(),
            counters: counters.clone(),
            sandbox: sandbox.to_string(),
            run: run.map(str::to_string),
            self_authority: self_authority.to_string(),
            pool: Arc::default(),
        });
        let cap = ctx.limits().max_connections;
        // `on_accept` runs inside the runtime's context (the accepting thread's `block_on`).
        let acceptor = Arc::new(accept::Acceptor::start(
            listener,
            self.rt.handle(),
            move |stream| {
                let ctx = ctx.clone();
                if take_place(&ctx.counters.connections, cap) {
                    tokio::spawn(async move {
                        let _place = Place(&ctx.counters.connections);
                        serve_connection(stream, ctx.clone()).await;
                    });
                } else if take_place(
                    &ctx.counters.refusing,
                    cap.saturating_mul(REFUSING_PER_PLACE),
                ) {
                    tokio::spawn(async move {
                        let _place = Place(&ctx.counters.refusing);
                        refuse_connection(stream, ctx.clone()).await;
                    });
                }
                // Past that, a connection is closed unanswered.
            },
        )?);
        let mut acceptors = match self.acceptors.lock() {
            Ok(a) => a,
            Err(poisoned) => poisoned.into_inner(),
        };
        acceptors.retain(|a| !a.is_stopped());
        acceptors.push(acceptor.clone());
        Ok(SandboxEgress { counters, acceptor })
    }

    /// Serves a listener in the foreground (`airlock proxy`).
    pub fn serve_forever(
        &self,
        listener: std::net::TcpListener,
        name: &str,
    ) -> std::io::Result<()> {
        let authority = listener.local_addr()?.to_string();
        let _s = self.serve_sandbox(listener, name, None, &authority)?;
        self.rt.block_on(std::future::pending::<()>());
        Ok(())
    }

    /// `airlock proxy check`: the decision for a URL, without connecting.
    pub fn check(&self, url: &str, resolve: bool) -> serde_json::Value {
        let shared = self.shared.clone();
        let d = self.rt.block_on(async move {
            let Some(policy) = shared.policy.as_ref() else {
                return decide::decide_raw(None, shared.resolver.as_ref(), "", Mode::Connect).await;
            };
            let (target, mode) = match check_target(url) {
                Ok(t) => t,
                Err(reason) => {
                    return Decision {
                        allow: false,
                        reason,
                        host: None,
                        port: None,
                        rule: None,
                        resolved: Vec::new(),
                    };
                }
            };
            decide::decide(policy, shared.resolver.as_ref(), &target, mode, resolve).await
        });
        json!({
            "url": url,
            "decision": if d.allow { "allow" } else { "deny" },
            "reason": d.reason,
            "rule": d.rule,
            "resolved": d.resolved,
        })
    }
}

fn check_target(url: &str) -> Result<(Authority, Mode), &'static str> {
    if let Some(rest) = url.strip_prefix("https://") {
        let auth = rest.split(['/', '?', '#']).next().unwrap_or("");
        let a = authority::parse_authority(auth, Some(443)).map_err(|e| e.reason())?;
        return Ok((a, Mode::Connect));
    }
    if url.starts_with("http://") {
        let (a, _) = authority::parse_absolute_http_url(url).map_err(|e| e.reason())?;
        return Ok((a, Mode::PlainHttp));
    }
    let a = authority::parse_authority(url, Some(443)).map_err(|e| e.reason())?;
    Ok((a, Mode::Connect))
}

/// Sends small writes at once on a socket the proxy relays through (`TCP_NODELAY`).
///
/// Why: the proxy relays what its peers write in the pieces it reads them, and a TLS handshake
/// or an HTTP head is a few small writes in a row. With Nagle's algorithm the second small write
/// waits for the ACK of the first, which the peer delays (≈ 40 ms on Linux) while it waits for
/// more: one stall per round trip of every tunnelled handshake. Every accepted socket (the
/// sandbox listeners and `airlock proxy --listen` alike) and every upstream socket gets it.
/// A failure is ignored: the option only changes when bytes leave, never which bytes or where.
pub(crate) fn send_small_writes_at_once(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
}

async fn serve_connection(stream: TcpStream, ctx: Arc<Ctx>) {
    send_small_writes_at_once(&stream);
    let limits = ctx.limits();
    let io = TokioIo::new(stream);
    let ctx2 = ctx.clone();
    let svc = service_fn(move |req| {
        let ctx = ctx2.clone();
        async move { Ok::<_, Infallible>(handle(req, ctx).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let _ = builder.serve_connection(io, svc).with_upgrades().await;
}

/// Answers every request on a connection over the listener's cap with 429
/// `too_many_connections` (a decision, logged) and closes it.
async fn refuse_connection(stream: TcpStream, ctx: Arc<Ctx>) {
    let limits = ctx.limits();
    let svc = service_fn(move |_req| {
        let ctx = ctx.clone();
        async move {
            ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
            ctx.log(json!({"event": "egress_decision", "decision": "deny", "reason": "too_many_connections"}));
            let mut r = refusal(StatusCode::TOO_MANY_REQUESTS, "too_many_connections");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            Ok::<_, Infallible>(r)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(false)
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

fn refusal(status: StatusCode, reason: &str) -> Response<Body> {
    let body = json!({"error": {"code": reason, "message": format!("airlock egress: {reason}")}})
        .to_string();
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(reason) {
        r.headers_mut().insert(REASON_HEADER, v);
    }
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

enum Target {
    Connect(String),
    Channel { name: String, rest: String },
    Plain(String),
    Bad(&'static str),
}

fn classify_request(req: &Request<Incoming>, self_authority: &str) -> Target {
    let uri = req.uri();
    if req.method() == Method::CONNECT {
        return match uri.authority() {
            Some(a)
                if uri.scheme().is_none()
                    && uri
                        .path_and_query()
                        .is_none_or(|p| p.as_str().is_empty() || p.as_str() == "/") =>
            {
                Target::Connect(a.as_str().to_string())
            }
            _ => Target::Bad("connect_target_not_authority"),
        };
    }
    let to_self = match uri.authority() {
        None => true,
        Some(a) => a.as_str() == self_authority,
    };
    if to_self {
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
        if let Some(rest) = path_and_query.strip_prefix(CHANNEL_PREFIX) {
            let (name, tail) = match rest.find(['/', '?']) {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            let tail = if tail.starts_with('?') {
                format!("/{tail}")
            } else {
                tail.to_string()
            };
            let tail = if tail.is_empty() {
                "/".to_string()
            } else {
                tail
            };
            return Target::Channel {
                name: name.to_string(),
                rest: tail,
            };
        }
        if uri.authority().is_none() {
            return Target::Bad("not_a_proxy_request");
        }
    }
    if uri.scheme_str() == Some("http") {
        return Target::Plain(uri.to_string());
    }
    Target::Bad("unsupported_request_target")
}

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>) -> Response<Body> {
    let limits = ctx.limits();
    // Every refusal is a decision and gets its log line (NET-7).
    let deny = |ctx: &Ctx, status: StatusCode, reason: &'static str| {
        ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
        ctx.log(json!({"event": "egress_decision", "decision": "deny", "reason": reason}));
        refusal(status, reason)
    };
    if ctx
        .shared
        .halt
        .get()
        .is_some_and(|h| h.load(Ordering::SeqCst))
    {
        return deny(&ctx, StatusCode::FORBIDDEN, "emergency_stop");
    }
    if !ctx.counters.admit(limits.max_requests_per_second) {
        let mut r = deny(&ctx, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    if ctx.counters.total_bytes() >= limits.max_bytes_per_sandbox {
        return deny(&ctx, StatusCode::TOO_MANY_REQUESTS, "sandbox_byte_cap");
    }
    if matches!(req.method().as_str(), "TRACE" | "TRACK") {
        return deny(&ctx, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    }
    match classify_request(&req, &ctx.self_authority) {
        Target::Connect(raw) => connect(req, raw, ctx).await,
        Target::Channel { name, rest } => channel(req, &name, &rest, ctx).await,
        Target::Plain(url) => plain(req, &url, ctx).await,
        Target::Bad(reason) => {
            ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
            ctx.log(json!({"event": "egress_decision", "decision": "deny", "reason": reason}));
            refusal(StatusCode::BAD_REQUEST, reason)
        }
    }
}

async fn dial(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), &'static str> {
    let mut last = "upstream_connect_failed";
    for a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                send_small_writes_at_once(&s);
                return Ok((s, *a));
            }
            Ok(Err(_)) => last = "upstream_connect_failed",
            Err(_) => last = "upstream_connect_timeout",
        }
    }
    Err(last)
}

fn dial_status(reason: &str) -> StatusCode {
    if reason == "upstream_connect_timeout" {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::BAD_GATEWAY
    }
}

async fn connect(req: Request<Incoming>, raw: String, ctx: Arc<Ctx>) -> Response<Body> {
    let d = decide::decide_raw(
        ctx.shared.policy.as_ref(),
        ctx.shared.resolver.as_ref(),
        &raw,
        Mode::Connect,
    )
    .await;
    ctx.record(&d, "connect");
    if !d.allow {
        return refusal(StatusCode::FORBIDDEN, d.reason);
    }
    let limits = ctx.limits();
    // The place is taken before dialling: concurrent CONNECTs waiting for
    // their upstreams must not all pass a check made before any of them
    // counted.
    if !take_place(&ctx.counters.tunnels, limits.max_concurrent_tunnels) {
        return refusal(StatusCode::TOO_MANY_REQUESTS, "too_many_tunnels");
    }
    let (upstream, addr) = match dial(&d.socket_addrs(), limits.connect_timeout).await {
        Ok(s) => s,
        Err(reason) => {
            ctx.counters.tunnels.fetch_sub(1, Ordering::AcqRel);
            return refusal(dial_status(reason), reason);
        }
    };
    let host = d.host.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let (up, down) = match hyper::upgrade::on(req).await {
            // The client's own socket, and what it sent after the CONNECT head.
            Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                Ok(parts) => {
                    let mut client = parts.io.into_inner();
                    let (cr, cw) = client.split();
                    tunnel(cr, cw, parts.read_buf, upstream, &ctx, &limits).await
                }
                Err(upgraded) => {
                    let (cr, cw) = tokio::io::split(TokioIo::new(upgraded));
                    tunnel(cr, cw, Bytes::new(), upstream, &ctx, &limits).await
                }
            },
            Err(_) => (0, 0),
        };
        ctx.counters.tunnels.fetch_sub(1, Ordering::Relaxed);
        ctx.line(logsink::Event::Closed {
            host: host.as_deref(),
            port: addr.port(),
            resolved_ip: addr.ip(),
            bytes_up: up,
            bytes_down: down,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    });
    Response::new(full(Bytes::new()))
}

/// Copies both ways with an idle timeout, a lifetime and byte caps; `early`
/// (what the client sent right behind its CONNECT head) goes first.
async fn tunnel<CR, CW>(
    mut cr: CR,
    mut cw: CW,
    early: Bytes,
    mut upstream: TcpStream,
    ctx: &Ctx,
    limits: &Limits,
) -> (u64, u64)
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
{
    let (mut ur, mut uw) = upstream.split();
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    let a = pump(
        &mut cr,
        &mut uw,
        early,
        &up,
        &ctx.counters.bytes_up,
        &ctx.counters,
        limits,
    );
    let b = pump(
        &mut ur,
        &mut cw,
        Bytes::new(),
        &down,
        &ctx.counters.bytes_down,
        &ctx.counters,
        limits,
    );
    let _ = tokio::time::timeout(limits.tunnel_lifetime, async { tokio::join!(a, b) }).await;
    (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed))
}

/// Relays one direction of a tunnel until end of file, an error, a byte
/// cap, or a read that waited `idle_timeout` in vain. The idle timer is one
/// per direction, armed once and moved only when it fires early, rather than
/// a timer set and cancelled around every read.
async fn pump<R, W>(
    r: &mut R,
    w: &mut W,
    early: Bytes,
    conn: &AtomicU64,
    total: &AtomicU64,
    counters: &Counters,
    limits: &Limits,
) where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    // Counts and checks `n` more bytes: false once a cap is passed.
    let within_caps = |n: usize| {
        let used = conn.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        total.fetch_add(n as u64, Ordering::Relaxed);
        used <= limits.max_bytes_per_connection
            && counters.total_bytes() <= limits.max_bytes_per_sandbox
    };
    if !early.is_empty() && (!within_caps(early.len()) || w.write_all(&early).await.is_err()) {
        let _ = w.shutdown().await;
        return;
    }
    let mut buf = vec![0u8; 32 * 1024];
    let idle = tokio::time::sleep(limits.idle_timeout);
    tokio::pin!(idle);
    loop {
        let waiting_since = tokio::time::Instant::now();
        let read = loop {
            tokio::select! {
                biased;
                r = r.read(&mut buf) => break r.ok(),
                () = &mut idle => {
                    // The timer was armed for an earlier wait: this wait ends its idle time
                    // later (reading a socket is cancel-safe, nothing read is lost).
                    let until = waiting_since + limits.idle_timeout;
                    if tokio::time::Instant::now() >= until {
                        break None;
                    }
                    idle.as_mut().reset(until);
                }
            }
        };
        let n = match read {
            None | Some(0) => break,
            Some(n) => n,
        };
        if !within_caps(n) || w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// Headers of one hop only, never forwarded (RFC 9110 7.6.1, and the legacy
/// `Keep-Alive` and `Proxy-Connection`).
const HOP_BY_HOP: [http::HeaderName; 9] = [
    header::CONNECTION,
    http::HeaderName::from_static("keep-alive"),
    http::HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Client credentials that never travel upstream through a channel.
const CLIENT_AUTH: &[&str] = &[
    "authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "x-goog-api-key",
    "openai-organization",
];

/// Drops the hop-by-hop headers and every header the `Connection` header names.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    if h.contains_key(header::CONNECTION) {
        // `HeaderName::from_bytes` lowercases; a listed name that is no valid header name
        // cannot be present. A listed hop-by-hop name (`keep-alive`) goes with the others below.
        let listed: Vec<http::HeaderName> = h
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|n| {
                !HOP_BY_HOP
                    .iter()
                    .any(|h| h.as_str().eq_ignore_ascii_case(n))
            })
            .filter_map(|n| http::HeaderName::from_bytes(n.as_bytes()).ok())
            .collect();
        for name in listed {
            h.remove(name);
        }
    }
    // Only the names present are removed (a message carries one or two, and each `remove`
    // hashes its name): at most one scan of the names per hop-by-hop header removed.
    while let Some(name) = h.keys().find(|k| HOP_BY_HOP.contains(k)).cloned() {
        h.remove(name);
    }
}

async fn plain(req: Request<Incoming>, url: &str, ctx: Arc<Ctx>) -> Response<Body> {
    let (target, path) = match authority::parse_absolute_http_url(url) {
        Ok(t) => t,
        Err(e) => {
            ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
            ctx.log(json!({"event": "egress_decision", "kind": "http", "decision": "deny", "reason": e.reason()}));
            return refusal(StatusCode::FORBIDDEN, e.reason());
        }
    };
    let d = match ctx.shared.policy.as_ref() {
        Some(p) => {
            decide::decide(
                p,
                ctx.shared.resolver.as_ref(),
                &target,
                Mode::PlainHttp,
                true,
            )
            .await
        }
        None => decide::decide_raw(None, ctx.shared.resolver.as_ref(), "", Mode::PlainHttp).await,
    };
    ctx.record(&d, "http");
    if !d.allow {
        return refusal(StatusCode::FORBIDDEN, d.reason);
    }
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let host = target.to_string();
    let upstream = Upstream {
        route: pool::Route::Plain {
            authority: host.clone(),
            rule: d.rule.clone(),
        },
        addrs: d.socket_addrs(),
        tls: None,
    };
    forward(parts, body, path, &host, upstream, None, ctx).await
}

/// Where a decided request goes: the route its decision produced, the
/// checked addresses (the only ones it may reach), and for an `https`
/// channel the name the upstream's certificate must carry.
struct Upstream {
    route: pool::Route,
    addrs: Vec<SocketAddr>,
    tls: Option<rustls::pki_types::ServerName<'static>>,
}

type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// A request on its way: the response head, the connection it came on and
/// whether that connection was reused.
struct Sent {
    response: Response<Incoming>,
    sender: Sender,
    key: pool::Key,
    reused: bool,
}

/// Sends a decided request on an idle connection this listener opened for
/// the same route and one of the checked addresses, or else on a new one.
/// A kept connection that turns out closed before the request was written
/// to it is dropped and the request goes on the next (what was written is
/// never sent twice).
async fn send(
    ctx: &Ctx,
    up: &Upstream,
    mut req: Request<Body>,
) -> Result<Sent, (StatusCode, &'static str)> {
    let limits = ctx.limits();
    for addr in &up.addrs {
        while let Some((key, mut sender)) = ctx.pool.take(&up.route, *addr) {
            // Usually ready already (its last response was read whole): no timer then.
            if !sender.is_ready()
                && !matches!(
                    tokio::time::timeout(limits.connect_timeout, sender.ready()).await,
                    Ok(Ok(()))
                )
            {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(response) => {
                    return Ok(Sent {
                        response,
                        sender,
                        key,
                        reused: true,
                    });
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err((StatusCode::BAD_GATEWAY, "upstream_request_failed")),
                },
            }
        }
    }
    let (mut sender, addr) = open(up, &limits, &ctx.shared).await?;
    let response = sender
        .send_request(req)
        .await
        .map_err(|_| (StatusCode::BAD_GATEWAY, "upstream_request_failed"))?;
    Ok(Sent {
        response,
        sender,
        key: pool::Key {
            route: up.route.clone(),
            addr,
        },
        reused: false,
    })
}

/// A new connection to one of the checked addresses (TLS for an `https` channel).
async fn open(
    up: &Upstream,
    limits: &Limits,
    shared: &Shared,
) -> Result<(Sender, SocketAddr), (StatusCode, &'static str)> {
    let (stream, addr) = dial(&up.addrs, limits.connect_timeout)
        .await
        .map_err(|reason| (dial_status(reason), reason))?;
    let sender = match &up.tls {
        None => handshake(TokioIo::new(stream)).await?,
        Some(name) => {
            let tls = match tokio::time::timeout(
                limits.connect_timeout,
                shared.tls.connect(name.clone(), stream),
            )
            .await
            {
                Ok(Ok(t)) => t,
                _ => return Err((StatusCode::BAD_GATEWAY, "upstream_tls_failed")),
            };
            handshake(TokioIo::new(tls)).await?
        }
    };
    Ok((sender, addr))
}

async fn handshake<S>(io: TokioIo<S>) -> Result<Sender, (StatusCode, &'static str)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| (StatusCode::BAD_GATEWAY, "upstream_handshake_failed"))?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn forward(
    mut parts: http::request::Parts,
    body: Incoming,
    path: String,
    host: &str,
    upstream: Upstream,
    scrub: Option<ChannelScrub>,
    ctx: Arc<Ctx>,
) -> Response<Body> {
    let started = Instant::now();
    let Ok(uri) = path.parse::<http::Uri>() else {
        return refusal(StatusCode::BAD_REQUEST, "bad_path");
    };
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    if let Ok(v) = HeaderValue::from_str(host) {
        parts.headers.insert(header::HOST, v);
    }
    let counters = ctx.counters.clone();
    let up_body = body
        .map_frame(move |f| {
            if let Some(d) = f.data_ref() {
                counters
                    .bytes_up
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
            }
            f
        })
        .boxed();
    let upstream_req = Request::from_parts(parts, up_body);
    let sent = match send(&ctx, &upstream, upstream_req).await {
        Ok(s) => s,
        Err((status, reason)) => return refusal(status, reason),
    };
    let (addr, reused) = (sent.key.addr, sent.reused);
    let (mut parts, body) = sent.response.into_parts();
    let body = pool::GiveBack::new(body, ctx.pool.clone(), sent.key, sent.sender);
    strip_hop_by_hop(&mut parts.headers);
    let status = parts.status.as_u16();
    let counters = ctx.counters.clone();
    let count_down = move |f: hyper::body::Frame<Bytes>| {
        if let Some(d) = f.data_ref() {
            counters
                .bytes_down
                .fetch_add(d.len() as u64, Ordering::Relaxed);
        }
        f
    };
    let Some(scrub) = scrub else {
        log_response(&ctx, host, addr, status, started, reused);
        // Streamed frame by frame: server-sent events pass through unbuffered.
        return Response::from_parts(parts, body.map_frame(count_down).boxed());
    };
    // NET-6: a channel's response reaches the sandbox only with every form of the credential
    // replaced. The body is scanned as it streams, so it must arrive as the bytes the
    // upstream's program wrote: an encoded body (gzip, br, …) cannot be scanned and is refused
    // (the request asked for `identity`).
    if !identity_encoded(&parts.headers) {
        ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
        ctx.log(json!({
            "event": "egress_response", "host": host, "resolved_ip": addr.ip(), "status": status,
            "channel": scrub.channel, "decision": "deny", "reason": "upstream_encoded_response",
        }));
        return refusal(StatusCode::BAD_GATEWAY, "upstream_encoded_response");
    }
    scrub_headers(&mut parts.headers, &scrub.patterns);
    // Replacing changes the length; the body goes out chunked (or close-delimited).
    parts.headers.remove(header::CONTENT_LENGTH);
    log_response(&ctx, host, addr, status, started, reused);
    let body = ScrubbedBody {
        inner: body.map_frame(count_down).boxed(),
        redactor: StreamRedactor::new(scrub.patterns.clone()),
        scrub,
        trailers: None,
        ended: false,
        reported: false,
        ctx,
    };
    Response::from_parts(parts, body.boxed())
}

fn log_response(
    ctx: &Ctx,
    host: &str,
    addr: SocketAddr,
    status: u16,
    started: Instant,
    reused: bool,
) {
    ctx.line(logsink::Event::Response {
        host,
        resolved_ip: addr.ip(),
        status,
        duration_ms: started.elapsed().as_millis() as u64,
        reused_connection: reused,
    });
}

/// What a channel's response is scrubbed of.
struct ChannelScrub {
    channel: String,
    patterns: Arc<airlock_redact::Patterns>,
}

/// Whether a body is the bytes as written (no `Content-Encoding`, or only `identity`).
fn identity_encoded(h: &HeaderMap) -> bool {
    h.get_all(header::CONTENT_ENCODING).iter().all(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .map(str::trim)
                .all(|t| t.is_empty() || t.eq_ignore_ascii_case("identity"))
        })
    })
}

/// Replaces every form of the credential in header values; drops a header whose name holds one.
fn scrub_headers(h: &mut HeaderMap, patterns: &airlock_redact::Patterns) {
    if patterns.is_empty() {
        return;
    }
    let names: Vec<http::HeaderName> = h.keys().cloned().collect();
    for name in names {
        if patterns.redact(name.as_str().as_bytes()) != name.as_str().as_bytes() {
            h.remove(&name);
            continue;
        }
        if let http::header::Entry::Occupied(mut entry) = h.entry(&name) {
            for v in entry.iter_mut() {
                let clean = patterns.redact(v.as_bytes());
                if clean != v.as_bytes() {
                    // `[REDACTED]` is a valid header value wherever the credential was.
                    *v = HeaderValue::from_bytes(&clean)
                        .unwrap_or_else(|_| HeaderValue::from_static(airlock_redact::REDACTED));
                }
            }
        }
    }
}

/// A channel's response body with the credential replaced as it streams (NET-6): each frame is
/// passed on at once except a tail that may be the start of the credential (bounded by the
/// longest form), so server-sent events stay unbuffered and a credential cut across frames is
/// still found. Trailers are scrubbed like headers.
struct ScrubbedBody {
    inner: Body,
    redactor: StreamRedactor,
    scrub: ChannelScrub,
    /// Trailers to send once the held tail has gone out.
    trailers: Option<HeaderMap>,
    ended: bool,
    reported: bool,
    ctx: Arc<Ctx>,
}

impl ScrubbedBody {
    /// The stream is over (or abandoned): flushes what was held and tells the operator, once,
    /// that this upstream echoes its credential. At the end of a stream this runs before the
    /// client can see the end, so the log line is there when the response is.
    fn end(&mut self) -> Vec<u8> {
        self.ended = true;
        let tail = self.redactor.finish();
        let replaced = self.redactor.replaced();
        if replaced > 0 && !self.reported {
            self.reported = true;
            self.ctx.log(json!({
                "event": "egress_credential_scrubbed",
                "channel": self.scrub.channel,
                "replaced": replaced,
            }));
        }
        tail
    }
}

impl hyper::body::Body for ScrubbedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        use hyper::body::Frame;
        use std::task::Poll;
        let this = self.get_mut();
        if let Some(t) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            let frame = match std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_frame(cx))
            {
                // An upstream error ends the stream; a held tail is dropped with it.
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) => frame,
                None => {
                    let tail = this.end();
                    return Poll::Ready((!tail.is_empty()).then(|| Ok(Frame::data(tail.into()))));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = this.redactor.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out.into()))));
                    }
                }
                Err(frame) => {
                    let Ok(mut trailers) = frame.into_trailers() else {
                        continue;
                    };
                    scrub_headers(&mut trailers, &this.scrub.patterns);
                    let tail = this.end();
                    if tail.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    this.trailers = Some(trailers);
                    return Poll::Ready(Some(Ok(Frame::data(tail.into()))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.trailers.is_none()
    }
}

impl Drop for ScrubbedBody {
    fn drop(&mut self) {
        // A stream cut short (client gone, upstream error) is reported too; what was held is
        // dropped with it.
        self.end();
    }
}

fn path_is_clean(p: &str) -> bool {
    let lower = p.to_ascii_lowercase();
    !(p.contains("..")
        || p.contains('\\')
        || lower.contains("%2e")
        || lower.contains("%2f")
        || lower.contains("%5c")
        || p.contains("//"))
}

async fn channel(req: Request<Incoming>, name: &str, rest: &str, ctx: Arc<Ctx>) -> Response<Body> {
    let deny = |ctx: &Ctx, status: StatusCode, reason: &'static str| {
        ctx.counters.denied.fetch_add(1, Ordering::Relaxed);
        ctx.log(json!({"event": "egress_decision", "kind": "channel", "channel": name, "decision": "deny", "reason": reason}));
        refusal(status, reason)
    };
    let Some(policy) = ctx.shared.policy.as_ref() else {
        return deny(&ctx, StatusCode::FORBIDDEN, crate::policy::NO_POLICY);
    };
    let Some(ch) = policy.channels.get(name).cloned() else {
        return deny(&ctx, StatusCode::NOT_FOUND, "unknown_channel");
    };
    if !ch.methods.contains(req.method()) {
        return deny(&ctx, StatusCode::FORBIDDEN, "channel_method_not_allowed");
    }
    let path_only = rest.split('?').next().unwrap_or("");
    if !path_is_clean(rest)
        || !ch
            .path_prefixes
            .iter()
            .any(|p| path_only.starts_with(p.as_str()))
    {
        return deny(&ctx, StatusCode::FORBIDDEN, "channel_path_not_allowed");
    }
    let addrs = match channel_addrs(&ch, policy, ctx.shared.resolver.as_ref()).await {
        Ok(a) => a,
        Err(reason) => return deny(&ctx, StatusCode::FORBIDDEN, reason),
    };
    ctx.counters.allowed.fetch_add(1, Ordering::Relaxed);
    ctx.log(json!({
        "event": "egress_decision", "kind": "channel", "channel": name, "host": host_string(&ch.host),
        "port": ch.port, "resolved": addrs.iter().map(|a| a.ip()).collect::<Vec<_>>(),
        "decision": "allow", "reason": "allowed", "method": req.method().as_str(),
    }));
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    for h in CLIENT_AUTH {
        parts.headers.remove(*h);
    }
    parts.headers.remove(&ch.header);
    // The response is scanned for the credential as it streams: ask for the body as written
    // (no compression), and whole (a range would let a client fetch the credential piecewise,
    // each piece too short to recognise).
    for h in [header::ACCEPT_ENCODING, header::RANGE, header::IF_RANGE] {
        parts.headers.remove(h);
    }
    parts.headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let Ok(value) = HeaderValue::from_str(ch.value.expose()) else {
        return refusal(StatusCode::INTERNAL_SERVER_ERROR, "channel_misconfigured");
    };
    let mut value = value;
    value.set_sensitive(true);
    parts.headers.insert(ch.header.clone(), value);
    let host_header = if (ch.scheme_https && ch.port == 443) || (!ch.scheme_https && ch.port == 80)
    {
        authority_host(&ch.host)
    } else {
        format!("{}:{}", authority_host(&ch.host), ch.port)
    };
    let scrub = ChannelScrub {
        channel: ch.name.clone(),
        patterns: ch.scrub.clone(),
    };
    let tls = if ch.scheme_https {
        let Host::Name(server_name) = &ch.host else {
            return refusal(StatusCode::BAD_GATEWAY, "channel_tls_needs_a_name");
        };
        let Ok(sn) = rustls::pki_types::ServerName::try_from(server_name.clone()) else {
            return refusal(StatusCode::BAD_GATEWAY, "channel_tls_bad_name");
        };
        Some(sn)
    } else {
        None
    };
    let upstream = Upstream {
        route: pool::Route::Channel {
            name: ch.name.clone(),
        },
        addrs,
        tls,
    };
    forward(
        parts,
        body,
        rest.to_string(),
        &host_header,
        upstream,
        Some(scrub),
        ctx,
    )
    .await
}

fn authority_host(h: &Host) -> String {
    match h {
        Host::Name(n) => n.clone(),
        Host::Ip(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        Host::Ip(ip) => ip.to_string(),
    }
}

/// The checked addresses of a channel's upstream. The operator configured
/// the origin, but its answers are still classified; only a loopback
/// upstream flagged `insecure_upstream_for_tests` skips that.
async fn channel_addrs(
    ch: &Channel,
    policy: &Policy,
    resolver: &dyn Resolve,
) -> Result<Vec<SocketAddr>, &'static str> {
    let ips = match &ch.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(n) if n == "localhost" => vec![std::net::IpAddr::from([127, 0, 0, 1])],
        Host::Name(n) => match policy.hosts.get(n) {
            Some(fixed) => fixed.clone(),
            None => resolver.lookup(n).await.map_err(|e| e.reason())?,
        },
    };
    for ip in &ips {
        let loopback_test = ch.insecure_upstream_for_tests && ip.is_loopback();
        if !loopback_test && let Some(reason) = decide::address_refusal(policy, *ip, ch.port) {
            return Err(reason);
        }
    }
    Ok(ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, ch.port))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_stripped_and_nothing_else() {
        let mut h = HeaderMap::new();
        for name in HOP_BY_HOP {
            h.append(name.clone(), HeaderValue::from_static("1"));
            h.append(name, HeaderValue::from_static("2"));
        }
        h.append(
            header::CONNECTION,
            HeaderValue::from_static("X-Private , close"),
        );
        h.append("x-private", HeaderValue::from_static("secret"));
        h.append("x-kept", HeaderValue::from_static("a"));
        h.append("x-kept", HeaderValue::from_static("b"));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        // Control: every name to be stripped is there before.
        for name in HOP_BY_HOP
            .iter()
            .chain([&http::HeaderName::from_static("x-private")])
        {
            assert!(h.contains_key(name), "{name}");
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<(String, String)> = h
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ("content-length".into(), "3".into()),
                ("x-kept".into(), "a".into()),
                ("x-kept".into(), "b".into()),
            ]
        );
        // Nothing to strip: nothing changes.
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
    }
}
