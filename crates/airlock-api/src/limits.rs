//! Rate limits, stream caps and request ids (API-1, API-4, API-6).
//!
//! Token buckets (`governor`, GCRA) keyed by caller identity: an API key's
//! id, else a session's id, else the client address (resolved through
//! `X-Forwarded-For` only from configured trusted proxies), each per route
//! class. Identity buckets are checked by the authenticating extractors, so
//! a caller cannot get fresh buckets by inventing credentials; the address
//! buckets are checked here, before any handler runs. Answers over a limit
//! are 429 with `Retry-After`.
//!
//! These are per-process protections of the HTTP server. Durable quotas
//! (per user and per workspace, surviving restarts and shared by nodes)
//! are rules of the service (`Service::create_run`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::{ApiError, AppState};

/// One bucket shape: `burst` requests at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub burst: u32,
    pub per_second: u32,
}

/// Limits of a server. `unlimited()` for tests that are about something
/// else.
#[derive(Debug, Clone)]
pub struct LimitConfig {
    /// Every request from one client address.
    pub per_client: Option<Bucket>,
    /// 401 answers to one client address: once spent, the address gets 429
    /// until the bucket refills.
    pub auth_failures_per_client: Option<Bucket>,
    /// Authenticated reads (GET/HEAD) per identity.
    pub reads_per_identity: Option<Bucket>,
    /// Authenticated writes per identity.
    pub writes_per_identity: Option<Bucket>,
    /// Concurrent event streams per user.
    pub streams_per_user: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        Self {
            per_client: Some(Bucket {
                burst: 600,
                per_second: 200,
            }),
            auth_failures_per_client: Some(Bucket {
                burst: 20,
                per_second: 1,
            }),
            reads_per_identity: Some(Bucket {
                burst: 300,
                per_second: 100,
            }),
            writes_per_identity: Some(Bucket {
                burst: 120,
                per_second: 30,
            }),
            streams_per_user: 16,
        }
    }
}

impl LimitConfig {
    pub fn unlimited() -> Self {
        Self {
            per_client: None,
            auth_failures_per_client: None,
            reads_per_identity: None,
            writes_per_identity: None,
            streams_per_user: usize::MAX,
        }
    }
}

type Keyed<K> = DefaultKeyedRateLimiter<K>;

fn limiter<K: std::hash::Hash + Eq + Clone>(b: Option<Bucket>) -> Option<Keyed<K>> {
    let b = b?;
    let rate = NonZeroU32::new(b.per_second.max(1))?;
    let burst = NonZeroU32::new(b.burst.max(1))?;
    Some(RateLimiter::keyed(
        Quota::per_second(rate).allow_burst(burst),
    ))
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct LimitCounters {
    pub rejected_client: AtomicU64,
    pub rejected_auth_failures: AtomicU64,
    pub rejected_identity: AtomicU64,
    pub rejected_streams: AtomicU64,
}

/// The limiters of one server process.
#[derive(Debug)]
pub struct Limits {
    pub cfg: LimitConfig,
    per_client: Option<Keyed<IpAddr>>,
    failures: Option<Keyed<IpAddr>>,
    /// Addresses refused until the instant (ms since start of `DefaultClock`).
    blocked: Mutex<HashMap<IpAddr, std::time::Instant>>,
    reads: Option<Keyed<String>>,
    writes: Option<Keyed<String>>,
    streams: Mutex<HashMap<String, usize>>,
    pub counters: LimitCounters,
    seen: AtomicU64,
}

/// 429 with the error shape and `Retry-After` (whole seconds, at least 1).
pub fn too_many(wait: Duration, message: &str) -> Response {
    ApiError(airlock_protocol::Error::limited(
        airlock_protocol::ErrorCode::RateLimited,
        message,
        wait,
    ))
    .into_response()
}

impl Limits {
    pub fn new(cfg: LimitConfig) -> Self {
        Self {
            per_client: limiter(cfg.per_client),
            failures: limiter(cfg.auth_failures_per_client),
            reads: limiter(cfg.reads_per_identity),
            writes: limiter(cfg.writes_per_identity),
            blocked: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            counters: LimitCounters::default(),
            seen: AtomicU64::new(0),
            cfg,
        }
    }

    /// Per-identity bucket for an authenticated request; `Err` is the wait.
    pub fn check_identity(&self, identity: &str, method: &Method) -> Result<(), Duration> {
        let l = if matches!(*method, Method::GET | Method::HEAD) {
            &self.reads
        } else {
            &self.writes
        };
        let Some(l) = l else { return Ok(()) };
        l.check_key(&identity.to_string()).map_err(|e| {
            self.counters
                .rejected_identity
                .fetch_add(1, Ordering::Relaxed);
            e.wait_time_from(DefaultClock::default().now())
        })
    }

    /// Takes one of the user's event-stream slots; the guard gives it back.
    pub fn open_stream(self: &std::sync::Arc<Self>, user: &str) -> Option<StreamSlot> {
        let mut m = self.streams.lock().ok()?;
        let n = m.entry(user.to_string()).or_insert(0);
        if *n >= self.cfg.streams_per_user {
            self.counters
                .rejected_streams
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            limits: self.clone(),
            user: user.to_string(),
        })
    }

    fn housekeeping(&self) {
        // Forget idle keys now and then so the maps stay bounded.
        if self
            .seen
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(4096)
        {
            for l in [&self.per_client, &self.failures].into_iter().flatten() {
                l.retain_recent();
            }
            for l in [&self.reads, &self.writes].into_iter().flatten() {
                l.retain_recent();
            }
            let now = std::time::Instant::now();
            if let Ok(mut b) = self.blocked.lock() {
                b.retain(|_, until| *until > now);
            }
        }
    }
}

/// An open event stream of a user; dropping it frees the slot.
#[derive(Debug)]
pub struct StreamSlot {
    limits: std::sync::Arc<Limits>,
    user: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.limits.streams.lock()
            && let Some(n) = m.get_mut(&self.user)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.user);
            }
        }
    }
}

tokio::task_local! {
    /// The id of the request being served; errors and logs carry it.
    pub static REQUEST_ID: String;
}

/// The current request's id (a fresh one outside a request).
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| airlock_service::new_request_id())
}

/// Request id + address limits, around everything else.
pub async fn guard(
    axum::extract::State(s): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let rid = airlock_service::new_request_id();
    let (parts, body) = req.into_parts();
    let ip = bucket_key(
        s.http
            .client_ip(&parts)
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
    );
    let exempt = matches!(parts.uri.path(), "/healthz" | "/readyz");
    // A webhook sender's refused delivery (a replay, a rotated secret) must
    // not lock out its other deliveries from the same shared addresses;
    // signatures are 256-bit MACs, not guessable, and the per-address
    // bucket still applies.
    let hook = parts.uri.path().starts_with("/v1/hooks/");
    let req = Request::from_parts(parts, body);
    REQUEST_ID
        .scope(rid.clone(), async move {
            let l = &s.limits;
            l.housekeeping();
            let mut r = if exempt {
                next.run(req).await
            } else if let Some(wait) = blocked_for(l, ip).filter(|_| !hook) {
                l.counters
                    .rejected_auth_failures
                    .fetch_add(1, Ordering::Relaxed);
                too_many(wait, "too many failed authentications from this address")
            } else if let Some(Err(e)) = l.per_client.as_ref().map(|c| c.check_key(&ip)) {
                l.counters.rejected_client.fetch_add(1, Ordering::Relaxed);
                too_many(
                    e.wait_time_from(DefaultClock::default().now()),
                    "too many requests from this address",
                )
            } else {
                let r = next.run(req).await;
                if r.status() == StatusCode::UNAUTHORIZED
                    && !hook
                    && let Some(Err(e)) = l.failures.as_ref().map(|f| f.check_key(&ip))
                {
                    let wait = e.wait_time_from(DefaultClock::default().now());
                    if let Ok(mut b) = l.blocked.lock() {
                        b.insert(ip, std::time::Instant::now() + wait);
                    }
                }
                r
            };
            crate::hardening_headers(r.headers_mut());
            if let Ok(v) = HeaderValue::from_str(&rid) {
                r.headers_mut().insert("x-request-id", v);
            }
            r
        })
        .await
}

/// The address a bucket belongs to: IPv4 as is (IPv4-mapped IPv6 too),
/// IPv6 by its /64, since one subscriber commonly holds a whole /64.
pub fn bucket_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

fn blocked_for(l: &Limits, ip: IpAddr) -> Option<Duration> {
    let b = l.blocked.lock().ok()?;
    let until = *b.get(&ip)?;
    until.checked_duration_since(std::time::Instant::now())
}
