//! Uploads over the real router (API-5): names with every traversal encoding are refused and
//! nothing is stored, declared media types must agree with the content, ZIP attacks are
//! refused, bodies are capped at 25 MiB, and download links are bound to one user, one file and
//! a deadline. The router runs in-process on a real SQLite store; no socket is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Cursor, Write};
use std::time::Duration;

use airlock_service::{LINK_TTL_SECS, MAX_UPLOAD_BYTES};
use airlock_store::DEFAULT_WORKSPACE;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{Cred, Harness, Resp, T0, request_builder};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

impl Harness {
    async fn get(&self, cred: &Cred, path: &str, ws: Option<&str>) -> Resp {
        self.call_ws(cred, "GET", path, None, ws).await
    }

    /// `POST /v1/uploads?name=<query_name>` — `query_name` goes into the URI as given.
    async fn upload(
        &self,
        cred: &Cred,
        query_name: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Resp {
        let mut b = request_builder(
            cred,
            "POST",
            &format!("/v1/uploads?name={query_name}"),
            None,
        );
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        self.send(b.body(Body::from(body)).unwrap()).await
    }

    async fn user_id(&self, name: &str) -> String {
        self.store().user_by_name(name).await.unwrap().unwrap().id
    }

    /// Published blobs in the artifact store.
    fn blobs(&self) -> usize {
        let root = self.dir.path().join("data/artifacts/sha256");
        let Ok(shards) = std::fs::read_dir(&root) else {
            return 0;
        };
        shards
            .map(|s| std::fs::read_dir(s.unwrap().path()).unwrap().count())
            .sum()
    }

    /// Staged files left in the store's tmp/.
    fn staged(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("data/artifacts/tmp"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    async fn uploads_of(&self, user: &str) -> usize {
        let id = self.user_id(user).await;
        self.store()
            .list_uploads(DEFAULT_WORKSPACE, &id, 500)
            .await
            .unwrap()
            .len()
    }
}

/// Percent-encodes every byte that is not unreserved, so the server's query decoding hands the
/// handler exactly `s`.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    airlock_store::sha256_hex(bytes)
}

fn assert_error(r: &Resp, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body["error"]["code"], code, "{}", r.body);
    assert!(r.body["error"]["message"].is_string(), "{}", r.body);
    assert!(r.body["error"]["request_id"].is_string(), "{}", r.body);
}

// ------------------------------------------------------------ names

#[tokio::test]
async fn api_5_traversal_names_are_refused_in_every_encoding_and_nothing_is_stored() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    // What the handler receives after the URL layer decoded the query once.
    let names = [
        "../x",
        "..%2fx",
        "..%2Fx",
        "%2e%2e/x",
        "%2E%2E%2Fx",
        "%252e%252e%252fx",
        "%25252e%25252e%25252fx",
        "%2525252e%2525252e%2525252fx",
        "..%5cx",
        "..%5Cx",
        "%5c",
        "a/../../b",
        "a/./b",
        "/etc/passwd",
        "%2fetc",
        "%252fetc",
        "//server/share",
        "C:\\x",
        "C:/x",
        "\\x",
        "a\\..\\b",
        "x%00.txt",
        "x\0y",
        "x\n.txt",
        "....//",
        "a//b",
        "a/",
        "..",
        ".",
        "",
        "%c0%ae%c0%ae/x",
        "\u{2024}\u{2024}/",
        "\u{2024}\u{2024}/x",
        "..\u{ff0f}x",
        "evil\u{202e}txt.exe",
        "CON",
        "nul.txt",
        &"a".repeat(256),
    ];
    for name in names {
        let r = h
            .upload(&owner, &enc(name), Some("text/plain"), b"data".to_vec())
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_name");
    }
    // The same attacks written into the URI as an attacker would (the URL layer decodes once,
    // the name rule decodes the rest).
    for raw in [
        "..%2fx",
        "..%2Fx",
        "%2e%2e/x",
        "%252e%252e%252fx",
        "..%5cx",
        "%2fetc",
        "x%00.txt",
        "a/../../b",
        "%25252e%25252e%25252fx",
    ] {
        let r = h
            .upload(&owner, raw, Some("text/plain"), b"data".to_vec())
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_name");
    }
    // A missing name, or an unknown parameter, is a bad query.
    let r = h
        .send(
            request_builder(&owner, "POST", "/v1/uploads", None)
                .header("content-type", "text/plain")
                .body(Body::from("x"))
                .unwrap(),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_query");
    let r = h
        .upload(&owner, "a.txt&path=../x", Some("text/plain"), b"x".to_vec())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_query");

    assert_eq!(h.uploads_of("owner").await, 0);
    assert_eq!(h.blobs(), 0);
    assert_eq!(h.staged(), 0);
}

// ------------------------------------------------------------ round trip

#[tokio::test]
async fn api_5_a_good_upload_is_stored_content_addressed_and_downloads_byte_for_byte() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let cases: &[(&str, &str, &[u8], &str)] = &[
        ("report.txt", "text/plain", b"hello, world\n", "text/plain"),
        (
            "a/b/c.json",
            "application/json",
            b"{\"a\": [1, 2]}",
            "application/json",
        ),
        (
            "\u{fc}n\u{ef}code.txt",
            "text/plain; charset=utf-8",
            "ünï\n".as_bytes(),
            "text/plain",
        ),
        ("pixel.png", "image/png", PNG, "image/png"),
        (
            "pixel-as-octets",
            "application/octet-stream",
            PNG,
            "image/png",
        ),
        ("table.csv", "text/csv", b"a,b\n1,2\n", "text/csv"),
        (
            "blob.bin",
            "application/octet-stream",
            b"\0\x01\x02\xff",
            "application/octet-stream",
        ),
        ("100%25.txt", "text/plain", b"percent", "text/plain"),
    ];
    for (name, declared, bytes, stored) in cases {
        let r = h
            .upload(&owner, &enc(name), Some(declared), bytes.to_vec())
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{name}: {}", r.body);
        let u = &r.body["upload"];
        let want_name = if *name == "100%25.txt" {
            "100%.txt"
        } else {
            name
        };
        assert_eq!(u["name"], want_name);
        assert_eq!(u["digest"], sha256_hex(bytes));
        assert_eq!(u["size"], bytes.len());
        assert_eq!(u["media_type"], *stored);
        assert_eq!(u["created_at"], T0);
        let id = u["id"].as_str().unwrap();
        assert!(id.starts_with("upl"), "{id}");
        let url = r.body["download_url"].as_str().unwrap();
        assert!(
            url.starts_with(&format!("/v1/uploads/{id}/content?expires=")),
            "{url}"
        );
        // Download round-trips the bytes, as an attachment that is never sniffed.
        let d = h.get(&owner, url, None).await;
        assert_eq!(d.status, StatusCode::OK, "{}", d.body);
        assert_eq!(d.bytes, *bytes, "{name}");
        assert_eq!(d.headers["content-type"], *stored);
        assert_eq!(d.headers["x-content-type-options"], "nosniff");
        let cd = d.headers["content-disposition"].to_str().unwrap();
        assert!(cd.starts_with("attachment; filename=\""), "{cd}");
        assert!(!cd.contains('/'), "{cd}");
        // The record is readable, with a fresh link for the caller.
        let g = h.get(&owner, &format!("/v1/uploads/{id}"), None).await;
        assert_eq!(g.status, StatusCode::OK, "{}", g.body);
        assert_eq!(g.body["upload"], *u);
        let again = h
            .get(&owner, g.body["download_url"].as_str().unwrap(), None)
            .await;
        assert_eq!(again.bytes, *bytes);
    }
    // Content-addressed: the same bytes again add a record but no blob.
    let before = h.blobs();
    assert_eq!(
        before,
        cases.len() - 1,
        "the two PNG uploads share one blob"
    );
    let r = h
        .upload(
            &owner,
            "copy.txt",
            Some("text/plain"),
            b"hello, world\n".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(h.blobs(), before);
    assert_eq!(h.uploads_of("owner").await, cases.len() + 1);
    assert_eq!(h.staged(), 0);
    // Each upload is on the audit record of its workspace.
    let lines = h.store().audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let created = lines
        .iter()
        .filter(|l| l.contains("\"upload.created\""))
        .count();
    assert_eq!(created, cases.len() + 1);
    // The signing key sits in the key directory, owner-only.
    let key = h.dir.path().join("data/keys/download.key");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

// ------------------------------------------------------------ media types

#[tokio::test]
async fn api_5_a_declared_type_that_contradicts_the_content_is_415() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let cases: &[(&str, &[u8])] = &[
        ("text/plain", PNG),
        ("image/jpeg", PNG),
        ("image/png", b"just text"),
        ("application/json", b"not json"),
        ("text/html", b"<script>alert(1)</script>"),
        ("image/svg+xml", b"<svg onload=alert(1)>"),
        ("application/pdf", b"\x7fELF\x02\x01"),
        ("text/plain; charset=utf-16", b"hello"),
        ("application/zip", b"%PDF-1.7"),
    ];
    for (declared, bytes) in cases {
        let r = h
            .upload(&owner, "f.bin", Some(declared), bytes.to_vec())
            .await;
        assert_error(
            &r,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "media_type_mismatch",
        );
    }
    let r = h.upload(&owner, "f.txt", None, b"hello".to_vec()).await;
    assert_error(
        &r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "media_type_required",
    );
    assert_eq!(h.uploads_of("owner").await, 0);
    assert_eq!(h.blobs(), 0);
}

// ------------------------------------------------------------ links

#[tokio::test]
async fn api_5_download_links_are_bound_to_one_user_one_file_and_a_deadline() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let dev = h.member(&owner, "dev", "developer").await;
    let a = h
        .upload(&owner, "a.txt", Some("text/plain"), b"file a".to_vec())
        .await;
    let b = h
        .upload(&owner, "b.txt", Some("text/plain"), b"file b".to_vec())
        .await;
    let a_id = a.body["upload"]["id"].as_str().unwrap().to_string();
    let b_id = b.body["upload"]["id"].as_str().unwrap().to_string();
    let link = a.body["download_url"].as_str().unwrap().to_string();
    let (path, query) = link.split_once('?').unwrap();
    let sig = query.split("&sig=").nth(1).unwrap().to_string();
    let expires: i64 = query
        .trim_start_matches("expires=")
        .split('&')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(expires, T0 / 1000 + LINK_TTL_SECS);
    assert_eq!(h.get(&owner, &link, None).await.status, StatusCode::OK);

    // A leaked link is useless to another user, even one who may read the upload.
    let r = h.get(&dev, &link, None).await;
    assert_error(&r, StatusCode::FORBIDDEN, "link_invalid");
    // ...and to nobody at all.
    let r = h.get(&Cred::None, &link, None).await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "unauthenticated");

    // A flipped signature byte, a moved deadline, another file, a missing part.
    let mut flipped = sig.clone().into_bytes();
    flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    for bad in [
        format!("{path}?expires={expires}&sig={flipped}"),
        format!("{path}?expires={}&sig={sig}", expires + 3600),
        format!("{path}?expires={}&sig={sig}", expires - 1),
        format!("/v1/uploads/{b_id}/content?expires={expires}&sig={sig}"),
        format!("{path}?expires={expires}&sig={}", sig.to_uppercase()),
        format!("{path}?expires={expires}&sig={}", &sig[..63]),
        format!("{path}?expires={expires}"),
        format!("{path}?sig={sig}"),
        format!("{path}?expires=soon&sig={sig}"),
        path.to_string(),
    ] {
        let r = h.get(&owner, &bad, None).await;
        assert_error(&r, StatusCode::FORBIDDEN, "link_invalid");
    }

    // The other member gets a link of their own, which works for them only.
    let g = h.get(&dev, &format!("/v1/uploads/{a_id}"), None).await;
    assert_eq!(g.status, StatusCode::OK, "{}", g.body);
    let dev_link = g.body["download_url"].as_str().unwrap().to_string();
    assert_ne!(dev_link, link);
    let r = h.get(&dev, &dev_link, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.bytes, b"file a");
    assert_error(
        &h.get(&owner, &dev_link, None).await,
        StatusCode::FORBIDDEN,
        "link_invalid",
    );

    // Up to the deadline the link works; from it on, it is refused.
    h.clock.advance(Duration::from_secs(
        u64::try_from(LINK_TTL_SECS).unwrap() - 1,
    ));
    assert_eq!(h.get(&owner, &link, None).await.status, StatusCode::OK);
    h.clock.advance(Duration::from_secs(1));
    let r = h.get(&owner, &link, None).await;
    assert_error(&r, StatusCode::FORBIDDEN, "link_expired");
    // A fresh link from the record works again.
    let g = h.get(&owner, &format!("/v1/uploads/{a_id}"), None).await;
    let fresh = g.body["download_url"].as_str().unwrap();
    assert_eq!(h.get(&owner, fresh, None).await.bytes, b"file a");
}

// ------------------------------------------------------------ size

#[tokio::test]
async fn api_5_a_body_over_25_mib_is_413_with_the_error_shape() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .upload(
            &owner,
            "big.bin",
            Some("application/octet-stream"),
            vec![0u8; 26 * 1024 * 1024],
        )
        .await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    assert_eq!(h.uploads_of("owner").await, 0);
    assert_eq!(h.blobs(), 0);
    // Exactly the limit is accepted: the route's limit replaces the 1 MiB default.
    let r = h
        .upload(
            &owner,
            "max.bin",
            Some("application/octet-stream"),
            vec![0u8; MAX_UPLOAD_BYTES],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["upload"]["size"], MAX_UPLOAD_BYTES);
    // Other routes keep their small limit.
    let r = h
        .send(
            request_builder(&owner, "POST", "/v1/workers/hello/runs", None)
                .header("content-type", "application/json")
                .body(Body::from(vec![b' '; 2 * 1024 * 1024]))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
}

// ------------------------------------------------------------ archives

fn zip_with(f: impl FnOnce(&mut zip::ZipWriter<Cursor<Vec<u8>>>)) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    f(&mut w);
    w.finish().unwrap().into_inner()
}

fn deflated() -> zip::write::SimpleFileOptions {
    zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated)
}

/// LSB-first bit writer for a hand-made DEFLATE stream.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    fn code(&mut self, code: u64, len: u32) {
        for i in (0..len).rev() {
            self.put((code >> i) & 1, 1);
        }
    }
}

/// One dynamic-Huffman DEFLATE block inflating to `total` zero bytes at about 2 bits per 258
/// bytes (see `airlock_files::zipcheck` tests for the derivation): 1 GiB in about 1 MiB.
fn zeros_deflate(total: u64) -> Vec<u8> {
    let mut b = Bits {
        out: Vec::new(),
        acc: 0,
        n: 0,
    };
    b.put(1, 1);
    b.put(2, 2);
    b.put(29, 5);
    b.put(1, 5);
    b.put(14, 4);
    for sym in [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1] {
        b.put(
            match sym {
                18 => 1,
                1 | 2 => 2,
                _ => 0,
            },
            3,
        );
    }
    let zeros = |b: &mut Bits, n: u64| {
        b.code(0, 1);
        b.put(n - 11, 7);
    };
    b.code(0b11, 2);
    zeros(&mut b, 138);
    zeros(&mut b, 117);
    b.code(0b11, 2);
    zeros(&mut b, 28);
    b.code(0b10, 2);
    b.code(0b10, 2);
    b.code(0b10, 2);
    b.code(0b10, 2);
    let matches = (total - 1) / 258;
    for _ in 0..matches {
        b.code(0, 1);
        b.code(0, 1);
    }
    for _ in 0..(total - 1 - matches * 258) {
        b.code(0b10, 2);
    }
    b.code(0b11, 2);
    if b.n > 0 {
        b.out.push(b.acc as u8);
    }
    b.out
}

/// A one-entry archive around a pre-compressed DEFLATE stream (which `ZipWriter` cannot take).
fn raw_deflate_zip(name: &[u8], data: &[u8], declared_size: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"PK\x03\x04");
    out.extend_from_slice(&20u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // time, date, crc (never reached)
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&declared_size.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(data);
    let cd = out.len() as u32;
    let mut c = Vec::new();
    c.extend_from_slice(b"PK\x01\x02");
    c.extend_from_slice(&(3u16 << 8 | 20).to_le_bytes());
    c.extend_from_slice(&20u16.to_le_bytes());
    c.extend_from_slice(&0u16.to_le_bytes());
    c.extend_from_slice(&8u16.to_le_bytes());
    c.extend_from_slice(&[0; 8]);
    c.extend_from_slice(&(data.len() as u32).to_le_bytes());
    c.extend_from_slice(&declared_size.to_le_bytes());
    c.extend_from_slice(&(name.len() as u16).to_le_bytes());
    c.extend_from_slice(&[0; 8]);
    c.extend_from_slice(&(0o100_644u32 << 16).to_le_bytes());
    c.extend_from_slice(&0u32.to_le_bytes());
    c.extend_from_slice(name);
    out.extend_from_slice(&c);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0\x01\0\x01\0");
    out.extend_from_slice(&(c.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

#[tokio::test]
async fn api_5_zip_attacks_are_422_and_a_good_zip_is_stored() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let symlink = zip_with(|w| {
        w.start_file("ok.txt", deflated()).unwrap();
        w.write_all(b"fine").unwrap();
        w.add_symlink("link", "/etc/passwd", deflated()).unwrap();
    });
    let file = |name: &'static str| {
        zip_with(move |w| {
            w.start_file(name, deflated()).unwrap();
            w.write_all(b"payload").unwrap();
        })
    };
    let duplicate = zip_with(|w| {
        w.start_file("Report.txt", deflated()).unwrap();
        w.write_all(b"1").unwrap();
        w.start_file("report.TXT", deflated()).unwrap();
        w.write_all(b"2").unwrap();
    });
    let stream = zeros_deflate(1 << 30);
    assert!(stream.len() < 2 * 1024 * 1024, "{}", stream.len());
    let bomb = raw_deflate_zip(b"zeros.bin", &stream, 1 << 30);
    let lying_bomb = raw_deflate_zip(b"small.txt", &stream, 1000);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("symlink", symlink, "zip_symlink"),
        ("dotdot", file("../evil"), "zip_bad_name"),
        ("encoded dotdot", file("..%2fevil"), "zip_bad_name"),
        ("absolute", file("/abs"), "zip_bad_name"),
        ("backslashes", file("a\\..\\b"), "zip_bad_name"),
        ("duplicate", duplicate, "zip_duplicate"),
        ("bomb", bomb, "zip_too_large"),
        ("lying bomb", lying_bomb, "zip_ratio"),
    ];
    for (what, bytes, reason) in cases {
        for declared in ["application/zip", "application/octet-stream"] {
            let r = h
                .upload(&owner, "a.zip", Some(declared), bytes.clone())
                .await;
            assert_error(&r, StatusCode::UNPROCESSABLE_ENTITY, "bad_archive");
            let message = r.body["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(reason), "{what}: {message}");
        }
    }
    assert_eq!(h.uploads_of("owner").await, 0);
    assert_eq!(h.blobs(), 0);

    let good = zip_with(|w| {
        w.add_directory("docs/", deflated()).unwrap();
        w.start_file("docs/readme.md", deflated()).unwrap();
        w.write_all(b"# hello\n").unwrap();
    });
    let r = h
        .upload(&owner, "bundle.zip", Some("application/zip"), good.clone())
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["upload"]["media_type"], "application/zip");
    let d = h
        .get(&owner, r.body["download_url"].as_str().unwrap(), None)
        .await;
    assert_eq!(d.bytes, good);
}

// ------------------------------------------------------------ isolation and roles

#[tokio::test]
async fn api_5_another_workspaces_upload_is_the_same_404_as_a_missing_one() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .upload(
            &owner,
            "secret.txt",
            Some("text/plain"),
            b"ws a only".to_vec(),
        )
        .await;
    let id = r.body["upload"]["id"].as_str().unwrap().to_string();
    let link = r.body["download_url"].as_str().unwrap().to_string();

    // Mallory owns another workspace and is not a member of the first.
    let mallory = h.member(&owner, "mallory", "viewer").await;
    let evil = h.create_workspace(&mallory, "evil").await;
    h.call(&owner, "DELETE", "/v1/members/mallory", None).await;

    let theirs = h
        .get(&mallory, &format!("/v1/uploads/{id}"), Some(&evil))
        .await;
    let missing = h
        .get(&mallory, "/v1/uploads/upl_missing", Some(&evil))
        .await;
    assert_error(&theirs, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(theirs.status, missing.status);
    assert_eq!(theirs.body["error"]["code"], missing.body["error"]["code"]);
    assert_eq!(
        theirs.body["error"]["message"],
        missing.body["error"]["message"]
    );
    // Mallory's uploads in her workspace are not visible from the first either.
    let own = h
        .send(
            request_builder(&mallory, "POST", "/v1/uploads?name=m.txt", Some(&evil))
                .header("content-type", "text/plain")
                .body(Body::from("mine"))
                .unwrap(),
        )
        .await;
    assert_eq!(own.status, StatusCode::CREATED, "{}", own.body);
    let own_id = own.body["upload"]["id"].as_str().unwrap();
    let r = h.get(&owner, &format!("/v1/uploads/{own_id}"), None).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");

    // The owner, acting in a second workspace of theirs, meets the same 404 — even with
    // their own valid link, which is bound to user and file but served per workspace.
    let w2 = h.create_workspace(&owner, "second").await;
    let r = h.get(&owner, &format!("/v1/uploads/{id}"), Some(&w2)).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    let r = h.get(&owner, &link, Some(&w2)).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(
        h.get(&owner, &link, Some(DEFAULT_WORKSPACE)).await.bytes,
        b"ws a only"
    );
}

#[tokio::test]
async fn api_5_a_viewer_cannot_upload_but_may_read() {
    let h = Harness::new().await;
    let owner = h.bootstrap_owner().await;
    let viewer = h.member(&owner, "vic", "viewer").await;
    let r = h
        .upload(&viewer, "v.txt", Some("text/plain"), b"nope".to_vec())
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(h.uploads_of("vic").await, 0);
    assert_eq!(h.blobs(), 0);
    // Unauthenticated: 401 before anything else.
    let r = h
        .upload(&Cred::None, "v.txt", Some("text/plain"), b"nope".to_vec())
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "unauthenticated");
    // A session without its CSRF token cannot upload either.
    if let Cred::Session { cookie, .. } = &owner {
        let r = h
            .send(
                Request::builder()
                    .method("POST")
                    .uri("/v1/uploads?name=x.txt")
                    .header("cookie", cookie)
                    .header("content-type", "text/plain")
                    .body(Body::from("x"))
                    .unwrap(),
            )
            .await;
        assert_error(&r, StatusCode::FORBIDDEN, "csrf_failed");
    }
    // The viewer reads the workspace's upload and gets a link of their own.
    let r = h
        .upload(&owner, "shared.txt", Some("text/plain"), b"shared".to_vec())
        .await;
    let id = r.body["upload"]["id"].as_str().unwrap();
    let g = h.get(&viewer, &format!("/v1/uploads/{id}"), None).await;
    assert_eq!(g.status, StatusCode::OK, "{}", g.body);
    let d = h
        .get(&viewer, g.body["download_url"].as_str().unwrap(), None)
        .await;
    assert_eq!(d.bytes, b"shared");
}

#[tokio::test]
async fn api_5_uploads_are_in_the_openapi_document() {
    let doc = airlock_api::openapi_document();
    let json = serde_json::to_value(&doc).unwrap();
    for (path, method) in [
        ("/v1/uploads", "post"),
        ("/v1/uploads/{id}", "get"),
        ("/v1/uploads/{id}/content", "get"),
    ] {
        assert!(
            json["paths"][path][method].is_object(),
            "{method} {path} missing"
        );
    }
}

/// A worker with one file input, `doc` (at most 16 bytes), and a string output.
fn reader_manifest() -> String {
    common::HELLO.replace("\"hello\"", "\"reader\"")
        + "[inputs.doc]\ntype = \"file\"\nmax_bytes = 16\n[outputs.text]\ntype = \"string\"\n"
}

/// The script a real sandbox would run; the recording launcher below plays it.
const READER: &str =
    "printf '{\"text\": \"%s\"}' \"$(cat /airlock/input/doc)\" > /airlock/output/result.json\n";

/// Plays `READER` through the launch's mounts exactly as the sandbox maps them: reads
/// `/airlock/input.json`, follows the path it gives for `doc` to its mount (which must be
/// read-only), and writes the bytes it found to `result.json`.
fn reading_launcher() -> airlock_launch::RecordingLauncher {
    airlock_launch::RecordingLauncher::answering(|launch, _| {
        let mount = |target: &str| {
            launch
                .sandbox
                .mounts
                .iter()
                .find(|m| m.target == std::path::Path::new(target))
                .unwrap_or_else(|| panic!("no mount at {target}"))
                .clone()
        };
        let input: serde_json::Value =
            serde_json::from_slice(&std::fs::read(mount("/airlock/input.json").source).unwrap())
                .unwrap();
        let path = input["doc"].as_str().expect("doc is a path string");
        assert_eq!(path, "/airlock/input/doc");
        let file = mount(path);
        assert!(!file.writable, "file inputs are read-only");
        let staged = file.source;
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&staged).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o400, "staged read-only");
        }
        let text = String::from_utf8(std::fs::read(&staged).unwrap()).unwrap();
        let out = mount("/airlock/output").source;
        std::fs::write(
            out.join("result.json"),
            serde_json::json!({ "text": text }).to_string(),
        )
        .unwrap();
        Ok(airlock_launch::Launched {
            result: airlock_launch::fake_result(Some(0), None),
            egress: None,
            notices: Vec::new(),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_5_a_run_reads_an_uploaded_file_input() {
    let launcher = std::sync::Arc::new(reading_launcher());
    let h = Harness::builder()
        .worker("reader", &reader_manifest(), READER)
        .launcher(launcher.clone())
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let up = h
        .upload(
            &owner,
            "doc.txt",
            Some("text/plain"),
            b"file bytes!".to_vec(),
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let id = up.body["upload"]["id"].as_str().unwrap().to_string();
    let digest = up.body["upload"]["digest"].as_str().unwrap().to_string();

    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/reader/runs",
            Some(serde_json::json!({"input": {"doc": {"upload": id}}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // The stored input names the upload, its name, size and digest: the input hash covers
    // the content.
    assert_eq!(
        r.body["run"]["input"]["doc"],
        serde_json::json!({"upload": id, "name": "doc.txt", "size": 11, "sha256": digest})
    );
    let run_id = r.body["run"]["id"].as_str().unwrap().to_string();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exec = tokio::spawn(h.svc.clone().run_executor(stop_rx));
    let run = loop {
        let run = h
            .store()
            .get_run(DEFAULT_WORKSPACE, &run_id)
            .await
            .unwrap()
            .unwrap();
        if run.state.is_terminal() {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop_tx.send(true);
    let _ = exec.await;
    assert_eq!(run.state.as_str(), "succeeded", "{run:?}");
    assert_eq!(launcher.count(), 1);
    let r = h
        .call(&owner, "GET", &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let got = serde_json::to_string(&r.body).unwrap();
    assert!(got.contains("file bytes!"), "{got}");
}

#[tokio::test]
async fn api_5_a_file_input_must_be_the_callers_own_upload_within_its_limit() {
    let h = Harness::builder()
        .worker("reader", &reader_manifest(), READER)
        .launcher(std::sync::Arc::new(reading_launcher()))
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let dev = h.member(&owner, "dev", "developer").await;
    let id_of = |r: &Resp| r.body["upload"]["id"].as_str().unwrap().to_string();
    let devs = id_of(
        &h.upload(&dev, "d.txt", Some("text/plain"), b"dev's".to_vec())
            .await,
    );
    // Made before the second workspace exists: in the default one.
    let big = id_of(
        &h.upload(&owner, "big.txt", Some("text/plain"), vec![b'x'; 17])
            .await,
    );
    let mine = id_of(
        &h.upload(&owner, "ok.txt", Some("text/plain"), b"ok".to_vec())
            .await,
    );
    let w2 = h.create_workspace(&owner, "second").await;
    let other_ws = h
        .send(
            request_builder(&owner, "POST", "/v1/uploads?name=o.txt", Some(&w2))
                .header("content-type", "text/plain")
                .body(Body::from("other ws"))
                .unwrap(),
        )
        .await;
    assert_eq!(other_ws.status, StatusCode::CREATED, "{}", other_ws.body);
    let other_ws = id_of(&other_ws);
    let cases = [
        (
            serde_json::json!({"upload": devs}),
            "is not an upload of yours in this workspace",
        ),
        (
            serde_json::json!({"upload": other_ws}),
            "is not an upload of yours in this workspace",
        ),
        (
            serde_json::json!({"upload": "upl_missing"}),
            "is not an upload of yours in this workspace",
        ),
        (
            serde_json::json!({"upload": big}),
            "the upload is 17 bytes, more than this input's limit of 16",
        ),
        (serde_json::json!("just text"), "a file input is given as"),
        (
            serde_json::json!({"upload": mine, "path": "/etc/passwd"}),
            "unknown key",
        ),
        (
            serde_json::json!({"upload": mine, "sha256": "0".repeat(64)}),
            "does not match the given sha256",
        ),
    ];
    for (doc, want) in cases {
        let r = h
            .call_ws(
                &owner,
                "POST",
                "/v1/workers/reader/runs",
                Some(serde_json::json!({"input": { "doc": doc }})),
                Some(DEFAULT_WORKSPACE),
            )
            .await;
        assert_error(&r, StatusCode::UNPROCESSABLE_ENTITY, "input_invalid");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("inputs.doc: "), "{doc}: {msg}");
        assert!(msg.contains(want), "{doc}: {msg}");
    }
    // The developer's own upload is theirs to use, though.
    let r = h
        .call(
            &dev,
            "POST",
            "/v1/workers/reader/runs",
            Some(serde_json::json!({"input": {"doc": {"upload": devs}}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let runs = h
        .store()
        .list_runs_where(
            DEFAULT_WORKSPACE,
            &airlock_store::RunFilter::default(),
            100,
            None,
        )
        .await
        .unwrap();
    assert_eq!(runs.len(), 1, "only the developer's run was created");
}
