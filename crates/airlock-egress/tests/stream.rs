//! The outbound client's streaming exchange (NET-9): chunks arrive as the
//! peer sends them, and every read is bounded by the idle timeout, the
//! total deadline and the byte ceiling. The peer is a raw HTTP/1.1 server
//! on loopback, so each test controls exactly which bytes are written and
//! when; waits are driven by channels, never by sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use airlock_egress::ScriptedResolver;
use airlock_egress::client::{ClientError, ClientOptions, OutboundClient, StreamLimits};
use airlock_egress::policy::Cidr;
use bytes::Bytes;
use http::{HeaderMap, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// What the raw server does after reading a request head.
enum Script {
    /// Writes these pieces, waiting for the paired signal (if any) before each.
    Pieces(Vec<(Option<oneshot::Receiver<()>>, Vec<u8>)>),
    /// Never answers (holds the connection until the client leaves).
    Silent,
}

async fn read_head(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

async fn serve_once(script: Script) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        read_head(&mut s).await;
        match script {
            Script::Pieces(pieces) => {
                for (wait, bytes) in pieces {
                    if let Some(w) = wait {
                        let _ = w.await;
                    }
                    if s.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                // Hold the connection open until the client closes it: a
                // missing terminator must look like a stall, not an end.
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                }
            }
            Script::Silent => {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
    });
    port
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut v = format!("{:x}\r\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}

const HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

fn loopback_client() -> OutboundClient {
    OutboundClient::new(
        Arc::new(ScriptedResolver::new()),
        ClientOptions {
            allow_plain_http: true,
            allowed_private: vec![Cidr::parse("127.0.0.1/32").unwrap()],
            ..ClientOptions::default()
        },
    )
}

fn limits() -> StreamLimits {
    StreamLimits {
        head_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        total_deadline: Duration::from_secs(60),
        max_body_bytes: 1 << 20,
    }
}

async fn open(
    c: &OutboundClient,
    port: u16,
    limits: StreamLimits,
) -> Result<airlock_egress::client::StreamingResponse, ClientError> {
    c.send_streaming(
        Method::POST,
        &format!("http://127.0.0.1:{port}/v1/stream"),
        HeaderMap::new(),
        Bytes::from_static(b"{}"),
        limits,
    )
    .await
}

#[tokio::test]
async fn net_9_streaming_hands_over_each_chunk_before_the_next_is_sent() {
    // The second chunk is written only after the test has received the
    // first: a buffering client would wait forever (and hit the deadline).
    let (go, wait) = oneshot::channel();
    let port = serve_once(Script::Pieces(vec![
        (None, HEAD.to_vec()),
        (None, chunk(b"data: one\n\n")),
        (
            Some(wait),
            [chunk(b"data: two\n\n"), b"0\r\n\r\n".to_vec()].concat(),
        ),
    ]))
    .await;
    let c = loopback_client();
    let mut r = open(&c, port, limits()).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.chunk().await.unwrap().as_deref(),
        Some(&b"data: one\n\n"[..])
    );
    go.send(()).unwrap();
    assert_eq!(
        r.chunk().await.unwrap().as_deref(),
        Some(&b"data: two\n\n"[..])
    );
    assert_eq!(
        r.chunk().await.unwrap(),
        None,
        "a terminated body ends cleanly"
    );
    assert_eq!(r.received(), 22);
}

#[tokio::test]
async fn net_9_streaming_idle_timeout_ends_a_stalled_body() {
    // The server sends one chunk and then nothing, forever.
    let port = serve_once(Script::Pieces(vec![
        (None, HEAD.to_vec()),
        (None, chunk(b"data: one\n\n")),
    ]))
    .await;
    let c = loopback_client();
    let mut r = open(
        &c,
        port,
        StreamLimits {
            idle_timeout: Duration::from_secs(1),
            ..limits()
        },
    )
    .await
    .unwrap();
    assert!(r.chunk().await.unwrap().is_some());
    let e = r.chunk().await.unwrap_err();
    assert!(matches!(e, ClientError::Timeout("stream_idle")), "{e:?}");
    // Positive control: the same idle timeout lets a body that keeps
    // coming finish.
    let port = serve_once(Script::Pieces(vec![
        (None, HEAD.to_vec()),
        (None, chunk(b"data: one\n\n")),
        (None, b"0\r\n\r\n".to_vec()),
    ]))
    .await;
    let r = open(
        &c,
        port,
        StreamLimits {
            idle_timeout: Duration::from_secs(1),
            ..limits()
        },
    )
    .await
    .unwrap();
    assert_eq!(&r.collect().await.unwrap()[..], b"data: one\n\n");
}

#[tokio::test]
async fn net_9_streaming_head_timeout_and_total_deadline() {
    let c = loopback_client();
    let port = serve_once(Script::Silent).await;
    let e = open(
        &c,
        port,
        StreamLimits {
            head_timeout: Duration::from_millis(300),
            ..limits()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ClientError::Timeout("response")), "{e:?}");
    // The total deadline bounds a body even while chunks keep the idle
    // timer happy: here the body stalls with a long idle timeout.
    let port = serve_once(Script::Pieces(vec![
        (None, HEAD.to_vec()),
        (None, chunk(b"data: one\n\n")),
    ]))
    .await;
    let mut r = open(
        &c,
        port,
        StreamLimits {
            total_deadline: Duration::from_secs(2),
            ..limits()
        },
    )
    .await
    .unwrap();
    assert!(r.chunk().await.unwrap().is_some());
    let e = r.chunk().await.unwrap_err();
    assert!(matches!(e, ClientError::Timeout("deadline")), "{e:?}");
}

#[tokio::test]
async fn net_9_streaming_refuses_a_body_over_the_ceiling() {
    let big = vec![b'x'; 64 * 1024];
    let pieces = |n: usize| {
        let mut v = vec![(None, HEAD.to_vec())];
        for _ in 0..n {
            v.push((None, chunk(&big)));
        }
        v.push((None, b"0\r\n\r\n".to_vec()));
        Script::Pieces(v)
    };
    let c = loopback_client();
    let ceiling = StreamLimits {
        max_body_bytes: 256 * 1024,
        ..limits()
    };
    let r = open(&c, serve_once(pieces(5)).await, ceiling)
        .await
        .unwrap();
    let e = r.collect().await.unwrap_err();
    assert!(matches!(e, ClientError::TooLarge(262144)), "{e:?}");
    // Positive control: exactly at the ceiling is accepted.
    let r = open(&c, serve_once(pieces(4)).await, ceiling)
        .await
        .unwrap();
    assert_eq!(r.collect().await.unwrap().len(), 256 * 1024);
}

#[tokio::test]
async fn net_9_streaming_a_cut_body_is_an_error_not_an_end() {
    // Chunked body, then the server closes the socket without the final
    // zero-length chunk.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        read_head(&mut s).await;
        s.write_all(HEAD).await.unwrap();
        s.write_all(&chunk(b"data: one\n\n")).await.unwrap();
        drop(s);
    });
    let c = loopback_client();
    let mut r = open(&c, port, limits()).await.unwrap();
    assert!(r.chunk().await.unwrap().is_some());
    let e = r.chunk().await.unwrap_err();
    assert!(matches!(e, ClientError::Http(_)), "{e:?}");
}

#[tokio::test]
async fn net_9_streaming_applies_address_classification() {
    // The same loopback listener, without the explicit allowance, is refused
    // before any connection.
    let port = serve_once(Script::Silent).await;
    let strict = OutboundClient::new(
        Arc::new(ScriptedResolver::new()),
        ClientOptions {
            allow_plain_http: true,
            ..ClientOptions::default()
        },
    );
    let e = open(&strict, port, limits()).await.unwrap_err();
    assert_eq!(e.reason(), "loopback_address");
    let plain_refused = OutboundClient::new(
        Arc::new(ScriptedResolver::new()),
        ClientOptions {
            allowed_private: vec![Cidr::parse("127.0.0.1/32").unwrap()],
            ..ClientOptions::default()
        },
    );
    let e = open(&plain_refused, port, limits()).await.unwrap_err();
    assert_eq!(e.reason(), "plain_http_not_allowed");
}
