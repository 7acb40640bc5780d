//! The least an HTTP proxy can do, as a floor for the egress proxy's benchmark (issue 14,
//! goal 2; BENCHMARKS.md, "The floor of any relay, and a scheduling lever tried and not
//! kept").
//!
//! For each client connection it reads one request head. A `CONNECT host:port` gets a
//! `200` and then a blind byte relay to `host:port`; an absolute-form request
//! (`GET http://host:port/…`) opens a connection to `host:port`, sends the head as it
//! came, and relays blindly from then on. Later requests on a kept-alive connection are
//! never parsed, decided, counted or logged: this does strictly less than any proxy that
//! checks each request, so its throughput bounds what such a proxy can reach on the same
//! machine. The runtime is the egress proxy's (one tokio worker), and every socket sets
//! `TCP_NODELAY`, as the proxy's do. (For a floor under another scheduling policy, start it
//! under `chrt`, as BENCHMARKS.md did with `chrt -b 0`.)
//!
//! Only destinations given with `--allow host:port` are reached (anything else gets a
//! `403`), so it is not an open relay even by mistake. It is a benchmark tool, not part
//! of airlock.
//!
//!     cargo run --release -p airlock-egress --example relay_floor -- \
//!         --listen 127.0.0.1:3128 --allow 127.0.0.1:8080 --allow 127.0.0.1:8443
//!
//! The accept loop runs on a thread of its own (the main thread, in `block_on`), as the
//! proxy's does; `--accept-on-worker` runs it on the worker beside the relays, where the proxy
//! accepted before (BENCHMARKS.md, "Where the proxy accepts", measured both).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read before a connection is dropped.
const MAX_HEAD: usize = 16 * 1024;

fn usage() -> ! {
    eprintln!("usage: relay_floor --listen ADDR [--allow HOST:PORT]... [--accept-on-worker]");
    std::process::exit(2)
}

fn main() {
    let mut listen: Option<SocketAddr> = None;
    let mut allow: Vec<String> = Vec::new();
    let mut accept_on_main = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--accept-on-worker" {
            accept_on_main = false;
            continue;
        }
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = Some(v.parse().unwrap_or_else(|_| usage())),
            ("--allow", Some(v)) => allow.push(v),
            _ => usage(),
        }
    }
    let Some(listen) = listen else { usage() };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay_floor: cannot start the runtime: {e}");
            std::process::exit(1)
        }
    };
    let allow: &'static [String] = Vec::leak(allow);
    // The accept loop runs on the thread calling `block_on`, which wakes the worker for
    // each connection, as in the proxy; with `--accept-on-worker` it runs on the worker,
    // beside the relays (the thread calling `block_on` then only waits).
    let accepting = async move {
        let listener = TcpListener::bind(listen).await?;
        loop {
            let (client, _) = listener.accept().await?;
            tokio::spawn(async move {
                let _ = serve(client, allow).await;
            });
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    let served = if accept_on_main {
        runtime.block_on(accepting)
    } else {
        match runtime.block_on(runtime.spawn(accepting)) {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    };
    if let Err(e) = served {
        eprintln!("relay_floor: {e}");
        std::process::exit(1)
    }
}

/// One client connection: its first head, then a blind relay.
async fn serve(mut client: TcpStream, allow: &[String]) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut head = Vec::with_capacity(1024);
    let end = loop {
        let mut buf = [0u8; 2048];
        let n = client.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
        if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if head.len() > MAX_HEAD {
            return Ok(());
        }
    };
    let text = String::from_utf8_lossy(head.get(..end).unwrap_or_default()).into_owned();
    let mut words = text.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (authority, tunnel) = if method == "CONNECT" {
        (target, true)
    } else {
        let rest = target.strip_prefix("http://").unwrap_or("");
        (rest.split('/').next().unwrap_or(""), false)
    };
    if !allow.iter().any(|a| a == authority) {
        client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    }
    let mut upstream = TcpStream::connect(authority).await?;
    upstream.set_nodelay(true)?;
    if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        // Bytes the client sent behind the CONNECT head go upstream first.
        upstream
            .write_all(head.get(end..).unwrap_or_default())
            .await?;
    } else {
        upstream.write_all(&head).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}
