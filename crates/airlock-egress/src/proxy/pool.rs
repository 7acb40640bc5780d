//! Idle upstream connections of one sandbox listener (plain HTTP and
//! channels), so that a decided request need not open a new connection.
//!
//! A connection is handed out only to a request the pipeline has already
//! decided, and only under the exact [`Key`] that decision produced: the
//! route (plain HTTP: the authority the request named and the rule that
//! allowed it; a channel: its name) and one of the addresses the decision
//! checked. So a connection opened for one destination, rule or channel
//! never carries another's request, and a name that now resolves elsewhere
//! never reaches a connection opened for its old address.
//!
//! Must not: be shared between listeners. Each listener's `Ctx` owns its
//! pool, so a connection never carries another sandbox's request, and a
//! channel's credential (added per request) never goes out on a connection
//! another sandbox uses. Nor may it hold a connection whose response was
//! cut short: only a body read to its end gives its connection back.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;

/// What a connection was opened for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// Plain HTTP: the authority (`host:port`) the request named and the
    /// policy rule that allowed it.
    Plain {
        authority: String,
        rule: Option<String>,
    },
    /// A credential channel, by name.
    Channel { name: String },
}

/// A route and the checked address the connection went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) route: Route,
    pub(super) addr: SocketAddr,
}

/// Idle connections kept per listener at most (the oldest goes first).
const MAX_IDLE: usize = 32;
/// How long an idle connection is kept. Shorter than common server
/// keep-alive timeouts (nginx: 75 s), so the upstream rarely closes a
/// connection just as it is reused.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// One listener's idle connections.
pub(super) struct Pool<B> {
    idle: Mutex<Vec<Idle<B>>>,
}

struct Idle<B> {
    key: Key,
    sender: SendRequest<B>,
    since: Instant,
}

impl<B> Default for Pool<B> {
    fn default() -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
        }
    }
}

impl<B> Pool<B> {
    /// The most recently returned open connection opened for `route` to
    /// `addr`, with the key it was kept under.
    pub(super) fn take(&self, route: &Route, addr: SocketAddr) -> Option<(Key, SendRequest<B>)> {
        let mut idle = self.idle.lock().ok()?;
        let now = Instant::now();
        drop_expired(&mut idle, now);
        // Only the candidates are checked for a close: the others are looked at when the
        // pool is full (`put`) or their time is up.
        while let Some(i) = idle
            .iter()
            .rposition(|c| c.key.addr == addr && &c.key.route == route)
        {
            let c = idle.remove(i);
            if !c.sender.is_closed() {
                return Some((c.key, c.sender));
            }
        }
        None
    }

    #[cfg(test)]
    fn take_key(&self, key: &Key) -> Option<SendRequest<B>> {
        self.take(&key.route, key.addr).map(|(_, s)| s)
    }

    /// Keeps a connection whose last response the upstream has sent whole.
    fn put(&self, key: Key, sender: SendRequest<B>) {
        if sender.is_closed() {
            return;
        }
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let now = Instant::now();
        drop_expired(&mut idle, now);
        if idle.len() >= MAX_IDLE {
            idle.retain(|c| !c.sender.is_closed());
        }
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            key,
            sender,
            since: now,
        });
    }

    /// Idle connections held now (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0)
    }
}

/// Drops the connections idle too long (dropping the last sender ends the
/// connection). They are the oldest: `idle` is in the order they were put,
/// with the time read under the lock, so only its front is looked at.
fn drop_expired<B>(idle: &mut Vec<Idle<B>>, now: Instant) {
    let expired = idle
        .iter()
        .position(|c| now.duration_since(c.since) < IDLE_FOR)
        .unwrap_or(idle.len());
    if expired > 0 {
        idle.drain(..expired);
    }
}

/// An upstream response body that gives its connection back to the pool
/// when the upstream has sent all of it: after the last data frame (a
/// length-delimited body) or at its end (chunked), in both cases before
/// the client can have seen the end of the response. The connection may
/// still be finishing the response then; whoever takes it waits for
/// `SendRequest::ready`. A body that fails or is dropped early takes its
/// connection with it, which closes it.
pub(super) struct GiveBack<B> {
    inner: Incoming,
    back: Option<(Arc<Pool<B>>, Key, SendRequest<B>)>,
}

impl<B> GiveBack<B> {
    pub(super) fn new(
        inner: Incoming,
        pool: Arc<Pool<B>>,
        key: Key,
        sender: SendRequest<B>,
    ) -> Self {
        let mut body = Self {
            inner,
            back: Some((pool, key, sender)),
        };
        if body.inner.is_end_stream() {
            // No body at all (HEAD, 204, 304, `Content-Length: 0`).
            body.give_back();
        }
        body
    }

    fn give_back(&mut self) {
        if let Some((pool, key, sender)) = self.back.take() {
            pool.put(key, sender);
        }
    }
}

impl<B> Body for GiveBack<B> {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            None => this.give_back(),
            Some(Ok(_)) if this.inner.is_end_stream() => this.give_back(),
            Some(Ok(_)) => {}
            // A broken response: the connection is not reused.
            Some(Err(_)) => this.back = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A sender on a connection that stays open for the test (the server
    /// side is kept alive by the returned listener's accepted stream).
    async fn sender() -> (
        SendRequest<http_body_util::Empty<Bytes>>,
        tokio::net::TcpStream,
    ) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (s, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(c))
            .await
            .unwrap();
        tokio::spawn(conn);
        (s, server)
    }

    fn key(route: Route, port: u16) -> Key {
        Key {
            route,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    #[tokio::test]
    async fn a_connection_is_taken_only_under_the_key_it_was_kept_under() {
        let plain = |a: &str, rule: &str| Route::Plain {
            authority: a.into(),
            rule: Some(rule.into()),
        };
        let kept = key(plain("a.example:80", "r1"), 80);
        let others = [
            key(plain("b.example:80", "r1"), 80),
            key(plain("a.example:80", "r2"), 80),
            key(plain("a.example:80", "r1"), 81),
            key(
                Route::Plain {
                    authority: "a.example:80".into(),
                    rule: None,
                },
                80,
            ),
            key(
                Route::Channel {
                    name: "a.example:80".into(),
                },
                80,
            ),
        ];
        let pool = Pool::default();
        let (s, _server) = sender().await;
        pool.put(kept.clone(), s);
        for other in &others {
            assert!(pool.take_key(other).is_none(), "{other:?}");
        }
        // Positive control: the same key takes it, once.
        assert!(pool.take_key(&kept).is_some());
        assert!(pool.take_key(&kept).is_none());
    }

    #[tokio::test]
    async fn a_connection_closed_or_expired_while_idle_is_never_taken() {
        let k = key(Route::Channel { name: "m".into() }, 1);
        let pool = Pool::default();
        // Control: an open connection put back is taken.
        let (s, _server) = sender().await;
        pool.put(k.clone(), s);
        assert!(pool.take_key(&k).is_some());
        // Closed by the upstream after it was put back.
        let (s, server) = sender().await;
        pool.put(k.clone(), s);
        drop(server);
        while pool
            .idle
            .lock()
            .unwrap()
            .iter()
            .any(|c| !c.sender.is_closed())
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(pool.take_key(&k).is_none());
        assert_eq!(pool.len(), 0);
        // Idle longer than `IDLE_FOR`, and a newer one behind it.
        let (old, _s1) = sender().await;
        let (new, _s2) = sender().await;
        let long_ago = Instant::now()
            .checked_sub(IDLE_FOR + Duration::from_secs(1))
            .unwrap();
        pool.idle.lock().unwrap().push(Idle {
            key: k.clone(),
            sender: old,
            since: long_ago,
        });
        let newer = key(Route::Channel { name: "n".into() }, 1);
        pool.put(newer.clone(), new);
        assert_eq!(pool.len(), 1, "the expired one went when the newer was put");
        assert!(pool.take_key(&k).is_none());
        assert!(pool.take_key(&newer).is_some());
    }

    #[tokio::test]
    async fn a_full_pool_drops_closed_connections_before_open_ones() {
        let pool = Pool::default();
        let mut servers = Vec::new();
        for port in 0..MAX_IDLE as u16 {
            let (s, server) = sender().await;
            servers.push(server);
            pool.put(key(Route::Channel { name: "m".into() }, port), s);
        }
        // The newest's upstream closes; the oldest is open.
        drop(servers.pop());
        while !pool.idle.lock().unwrap().last().unwrap().sender.is_closed() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (s, _server) = sender().await;
        pool.put(key(Route::Channel { name: "m".into() }, 1000), s);
        assert_eq!(pool.len(), MAX_IDLE);
        assert!(
            pool.take_key(&key(Route::Channel { name: "m".into() }, 0))
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_closed_connection_is_not_kept_and_the_pool_is_bounded() {
        let pool = Pool::default();
        let (s, server) = sender().await;
        drop(server);
        // Wait for the connection task to see the close.
        while !s.is_closed() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        pool.put(key(Route::Channel { name: "m".into() }, 1), s);
        assert_eq!(pool.len(), 0);
        let mut servers = Vec::new();
        for port in 0..(MAX_IDLE as u16 + 3) {
            let (s, server) = sender().await;
            servers.push(server);
            pool.put(key(Route::Channel { name: "m".into() }, port), s);
        }
        assert_eq!(pool.len(), MAX_IDLE);
        // The oldest went first.
        assert!(
            pool.take_key(&key(Route::Channel { name: "m".into() }, 0))
                .is_none()
        );
        assert!(
            pool.take_key(&key(
                Route::Channel { name: "m".into() },
                MAX_IDLE as u16 + 2
            ))
            .is_some()
        );
    }
}
