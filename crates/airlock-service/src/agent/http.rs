//! `http_request` (AGT-3, NET-1): the agent's HTTP request leaves through
//! an egress proxy that holds the worker's policy — the same proxy a
//! sandbox of the worker gets, on a loopback listener of its own — so the
//! allowlist, the address classification, the credential channels and the
//! byte counts apply to the harness's requests exactly as to a workload's.
//! Plain `http://` goes to the proxy in absolute form; `https://` goes
//! through a `CONNECT` tunnel, with TLS to the origin verified against the
//! system roots. A credential channel is named as a workload names it,
//! `http://127.0.0.1:3128/channels/<name>/<path>`: the proxy adds the
//! credential on its side.
//!
//! What comes back is data for the model (bounded), and it taints the
//! context: the result names the URL.
//!
//! Must not: connect anywhere but the proxy; follow a redirect; send a
//! credential of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use airlock_agent::bounded;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::setup::ToolEgress;
use super::tools::ToolOutput;

/// The most bytes of a response body read.
const MAX_BODY: usize = 1 << 20;
/// One request, connect to last byte.
const DEADLINE: Duration = Duration::from_secs(30);

pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) url: String,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: Option<String>,
}

/// Sends `req` through a proxy with `egress`; `halt` is the workspace's
/// emergency stop flag, read by the proxy on every request.
pub(crate) async fn request(
    egress: ToolEgress,
    halt: Arc<AtomicBool>,
    req: Request,
    max: usize,
) -> ToolOutput {
    let url = req.url.clone();
    let method = req.method.clone();
    // The proxy brings its own runtime, which must be dropped outside an
    // async context: the whole exchange runs on a blocking thread.
    let done = tokio::task::spawn_blocking(move || exchange_blocking(egress, halt, req)).await;
    let (result, bytes) = match done {
        Ok(x) => x,
        Err(e) => {
            return ToolOutput::failed(
                "http_request failed (internal error)",
                json!({"error": "internal", "detail": e.to_string()}),
            );
        }
    };
    let taint = Some(format!("the response to {method} {url}"));
    match result {
        Ok(r) => {
            let mut content = format!("HTTP {}\n", r.status);
            for (k, v) in &r.headers {
                content.push_str(&format!("{k}: {v}\n"));
            }
            content.push('\n');
            content.push_str(&bounded(&r.body, max));
            if r.truncated {
                content.push_str(&format!("\n[… the body was cut at {MAX_BODY} bytes …]"));
            }
            ToolOutput {
                ok: (200..400).contains(&r.status),
                content,
                record: json!({"status": r.status, "bytes": r.body.len(), "truncated": r.truncated, "egress_bytes": bytes}),
                egress_bytes: bytes,
                taint,
                ..ToolOutput::default()
            }
        }
        Err(e) => ToolOutput {
            ok: false,
            content: format!("http_request failed: {e}"),
            record: json!({"error": e, "egress_bytes": bytes}),
            egress_bytes: bytes,
            taint: None,
            ..ToolOutput::default()
        },
    }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    truncated: bool,
}

fn exchange_blocking(
    egress: ToolEgress,
    halt: Arc<AtomicBool>,
    req: Request,
) -> (Result<Response, String>, u64) {
    let plan = airlock_launch::EgressPlan {
        policy: Ok(egress.policy),
        channels: egress.channels,
        log: egress.log,
        resolver: None,
        halt: Some(halt),
    };
    let mut notices = Vec::new();
    let proxy = match airlock_launch::start_proxy(plan, &mut notices) {
        Ok(p) => p,
        Err(e) => return (Err(format!("the egress proxy could not start: {e}")), 0),
    };
    let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => return (Err(format!("the egress proxy could not listen: {e}")), 0),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return (Err(e.to_string()), 0),
    };
    // The proxy answers to the address a sandbox knows it by, so the
    // agent names a channel with the same URL a workload uses
    // (`http://127.0.0.1:3128/channels/<name>/…`).
    let serving = match proxy.serve_sandbox(
        listener,
        "agent",
        None,
        airlock_egress::proxy::SANDBOX_PROXY_ADDR,
    ) {
        Ok(s) => s,
        Err(e) => return (Err(format!("the egress proxy could not serve: {e}")), 0),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return (Err(e.to_string()), 0),
    };
    let result = rt.block_on(async {
        tokio::time::timeout(DEADLINE, exchange(addr, req))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no complete answer within {} s",
                    DEADLINE.as_secs()
                ))
            })
    });
    let summary = serving.shutdown();
    drop(proxy);
    (result, summary.bytes_up.saturating_add(summary.bytes_down))
}

/// Origin (scheme, host, port) and the path of an `http(s)` URL.
fn split_url(url: &str) -> Result<(bool, String, u16, String), String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("only http:// and https:// URLs".into());
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let default = if https { 443 } else { 80 };
    let a = airlock_egress::authority::parse_authority(authority, Some(default))
        .map_err(|e| format!("the URL's host: {e}"))?;
    Ok((https, a.host.to_string(), a.port, path))
}

async fn exchange(proxy: std::net::SocketAddr, req: Request) -> Result<Response, String> {
    let (https, host, port, path) = split_url(&req.url)?;
    let mut stream = tokio::net::TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("cannot reach the egress proxy: {e}"))?;
    let host_header = if (https && port == 443) || (!https && port == 80) {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let mut builder = http::Request::builder().method(req.method.as_str());
    for (k, v) in &req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    builder = builder.header(http::header::HOST, host_header.as_str());
    let body = Full::new(Bytes::from(req.body.unwrap_or_default().into_bytes()));
    if https {
        // A tunnel to the origin, then TLS end to end.
        let connect = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        stream
            .write_all(connect.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let head = read_head(&mut stream).await?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0);
        if status != 200 {
            return Err(format!(
                "the egress proxy refused the connection: {}",
                head.lines().next().unwrap_or_default()
            ));
        }
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("the URL's host is not a TLS name: {e}"))?;
        let tls = airlock_egress::proxy::tls_connector()
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS with {host}: {e}"))?;
        let request = builder
            .uri(path.as_str())
            .body(body)
            .map_err(|e| format!("the request is malformed: {e}"))?;
        send(hyper_util::rt::TokioIo::new(tls), request).await
    } else {
        let request = builder
            .uri(req.url.as_str())
            .body(body)
            .map_err(|e| format!("the request is malformed: {e}"))?;
        send(hyper_util::rt::TokioIo::new(stream), request).await
    }
}

/// The head of a `CONNECT` answer (bounded).
async fn read_head(stream: &mut tokio::net::TcpStream) -> Result<String, String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() > 16 * 1024 {
            return Err("the egress proxy's answer head is too long".into());
        }
        let n = stream.read(&mut byte).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the egress proxy closed the connection".into());
        }
        buf.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

async fn send<S>(io: S, request: http::Request<Full<Bytes>>) -> Result<Response, String>
where
    S: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| format!("the request failed: {e}"))?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "content-type" | "content-length" | "location" | "retry-after" | "x-airlock-reason"
            )
        })
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            let room = MAX_BODY.saturating_sub(out.len());
            if data.len() > room {
                out.extend_from_slice(&data[..room]);
                truncated = true;
                break;
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Response {
        status,
        headers,
        body: out,
        truncated,
    })
}
