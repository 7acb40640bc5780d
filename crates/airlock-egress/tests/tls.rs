//! Verified TLS to upstreams: the outbound client (NET-9) and a credential
//! channel over HTTPS (NET-6), against a real TLS server on loopback whose
//! certificate comes from a CA made for the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_egress::client::{ClientError, ClientOptions, OutboundClient};
use airlock_egress::policy::{Cidr, EnvAndFiles, Policy};
use airlock_egress::proxy::{NullLog, tls_connector_with_roots};
use airlock_egress::{Egress, ScriptedResolver};
use bytes::Bytes;
use http::{HeaderMap, Method};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NAME: &str = "api.airlock-test.dev";

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |args: &[&str]| {
            let s = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .unwrap();
            assert!(
                s.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&s.stderr)
            );
        };
        std::fs::write(d.join("ext"), format!("subjectAltName=DNS:{NAME}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")).unwrap();
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=airlock test CA",
        ]);
        run(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            &format!("/CN={NAME}"),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ]);
        Self { dir }
    }
    fn path(&self, f: &str) -> std::path::PathBuf {
        self.dir.path().join(f)
    }
    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path("ca.pem")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        roots
    }
}

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

/// A TLS server: `/redirect` → 302, `/big` → 5 MiB, `/hang` → never
/// answers, anything else → 200 "hello over tls". Records request heads.
async fn tls_server(pki: &Pki, seen: Arc<Seen>) -> u16 {
    let certs: Vec<_> = CertificateDer::pem_file_iter(pki.path("leaf.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(pki.path("leaf.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = vec![0u8; 16384];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let Ok(n) = tls.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                seen.0.lock().unwrap().push(head.clone());
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let resp: Vec<u8> = match path.as_str() {
                    "/redirect" => b"HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example.org/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
                    "/big" => {
                        let body = vec![b'x'; 5 << 20];
                        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
                        r.extend(body);
                        r
                    }
                    "/hang" => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    _ => b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\nhello over tls".to_vec(),
                };
                let _ = tls.write_all(&resp).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn loopback_name_resolver() -> Arc<ScriptedResolver> {
    Arc::new(ScriptedResolver::new().answer(NAME, Ok(vec!["127.0.0.1".parse::<IpAddr>().unwrap()])))
}

fn client(pki: &Pki, opts: ClientOptions) -> OutboundClient {
    OutboundClient::new(loopback_name_resolver(), opts)
        .with_tls(tls_connector_with_roots(pki.roots()))
}

fn loopback_allowed() -> ClientOptions {
    ClientOptions {
        allowed_private: vec![Cidr::parse("127.0.0.1/32").unwrap()],
        ..ClientOptions::default()
    }
}

#[tokio::test]
async fn net_9_client_verifies_tls_and_returns_redirects_unfollowed() {
    let pki = Pki::new();
    let seen = Arc::new(Seen::default());
    let port = tls_server(&pki, seen.clone()).await;
    let c = client(&pki, loopback_allowed());
    let r = c
        .send(
            Method::GET,
            &format!("https://{NAME}:{port}/"),
            HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"hello over tls"[..]));
    let r = c
        .send(
            Method::GET,
            &format!("https://{NAME}:{port}/redirect"),
            HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 302, "redirects come back to the caller");
    assert_eq!(seen.0.lock().unwrap().len(), 2, "and are not followed");
    // Positive control: the same server is refused without the test CA.
    let system = OutboundClient::new(loopback_name_resolver(), loopback_allowed());
    let e = system
        .send(
            Method::GET,
            &format!("https://{NAME}:{port}/"),
            HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Tls(_)), "{e:?}");
}

#[tokio::test]
async fn net_9_client_enforces_size_ceiling_and_deadline() {
    let pki = Pki::new();
    let port = tls_server(&pki, Arc::new(Seen::default())).await;
    let c = client(
        &pki,
        ClientOptions {
            max_response_bytes: 1 << 20,
            ..loopback_allowed()
        },
    );
    let e = c
        .send(
            Method::GET,
            &format!("https://{NAME}:{port}/big"),
            HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::TooLarge(_)), "{e:?}");
    let c = client(
        &pki,
        ClientOptions {
            total_deadline: Duration::from_millis(500),
            ..loopback_allowed()
        },
    );
    let started = Instant::now();
    let e = c
        .send(
            Method::GET,
            &format!("https://{NAME}:{port}/hang"),
            HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Timeout(_)), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn net_9_client_refuses_internal_and_malformed_destinations() {
    let resolver = Arc::new(
        ScriptedResolver::new()
            .answer("private.example.org", Ok(vec!["10.0.0.7".parse().unwrap()]))
            .answer(
                "rebound.example.org",
                Ok(vec![
                    "93.184.215.14".parse().unwrap(),
                    "::ffff:127.0.0.1".parse().unwrap(),
                ]),
            ),
    );
    let c = OutboundClient::new(resolver, ClientOptions::default());
    for (url, reason) in [
        (
            "https://169.254.169.254/latest/meta-data",
            "metadata_address",
        ),
        ("https://127.0.0.1/", "loopback_address"),
        ("https://0x7f.1/", "loopback_address"),
        ("https://[::1]/", "loopback_address"),
        ("https://private.example.org/", "private_address"),
        ("https://rebound.example.org/", "loopback_address"),
        ("https://localhost/", "special_use_name"),
        ("http://example.org/", "plain_http_not_allowed"),
        ("ftp://example.org/", "url_scheme_not_allowed"),
        ("https://user:pw@example.org/", ""),
        ("https://example.org#frag", "url_fragment"),
        ("https://example.org//evil.com/", "url_bad_path"),
    ] {
        let e = c
            .send(Method::GET, url, HeaderMap::new(), Bytes::new())
            .await
            .unwrap_err();
        if reason.is_empty() {
            assert!(matches!(e, ClientError::Url(_)), "{url}: {e:?}");
        } else {
            assert_eq!(e.reason(), reason, "{url}: {e:?}");
        }
    }
}

#[test]
fn net_9_client_reads_no_ambient_variables() {
    // Structural check: the client and the TLS loader never consult the
    // environment (HTTPS_PROXY, SSL_CERT_FILE, …).
    for f in ["client.rs", "proxy.rs"] {
        let src =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(f))
                .unwrap();
        assert!(!src.contains("env::var"), "{f} reads the environment");
    }
}

#[test]
fn net_6_channel_over_verified_tls_injects_the_credential() {
    let pki = Pki::new();
    let seen = Arc::new(Seen::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let port = rt.block_on(tls_server(&pki, seen.clone()));
    let policy = format!(
        "[hosts]\n\"{NAME}\" = [\"127.0.0.1\"]\n[[allow]]\ncidr = \"127.0.0.1/32\"\nports = [{port}]\n[channels.model]\nupstream = \"https://{NAME}:{port}\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{env:PATH}}\"\nmethods = [\"GET\"]\n"
    );
    let path_secret = std::env::var("PATH").unwrap();
    let call = |egress: &Egress| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        let _s = egress
            .serve_sandbox(l, "t", None, &format!("127.0.0.1:{p}"))
            .unwrap();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        use std::io::{Read, Write};
        s.write_all(b"GET /channels/model/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fake\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let trusted = Egress::with_tls(
        Policy::from_toml(&policy, &EnvAndFiles),
        loopback_name_resolver(),
        Arc::new(NullLog),
        tls_connector_with_roots(pki.roots()),
    )
    .unwrap();
    let out = call(&trusted);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    // The body is streamed (scanned for the credential), so it arrives chunked.
    assert!(out.contains("hello over tls"), "{out}");
    let heads = seen.0.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].contains(&format!("authorization: Bearer {path_secret}"))
            || heads[0].contains(&format!("Authorization: Bearer {path_secret}")),
        "{}",
        heads[0]
    );
    assert!(
        !heads[0].contains("Bearer fake"),
        "client auth must be stripped"
    );
    // Positive control: with the system roots the test CA is not trusted
    // and the channel refuses to talk to the upstream.
    let untrusting = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        loopback_name_resolver(),
        Arc::new(NullLog),
    )
    .unwrap();
    let out = call(&untrusting);
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert!(out.contains("upstream_tls_failed"));
    drop(rt);
}
